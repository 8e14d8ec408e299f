# tt_embed(<target> <input file> <C symbol>): compiles the file's bytes into
# <target> as `const char <symbol>[]` (NUL-terminated) and
# `const unsigned long <symbol>_len`. The file is re-embedded when it changes.
function(tt_embed target input symbol)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/embed_${symbol}.c)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${input} -DOUT=${out} -DSYM=${symbol}
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFile.cmake
    DEPENDS ${input} ${PROJECT_SOURCE_DIR}/cmake/EmbedFile.cmake
    COMMENT "Embedding ${input}")
  target_sources(${target} PRIVATE ${out})
endfunction()
