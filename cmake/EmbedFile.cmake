file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE ${OUT} "/* generated from ${IN}; do not edit */\n"
  "const char ${SYM}[] = {${body}0x00};\n"
  "const unsigned long ${SYM}_len = ${len};\n")
