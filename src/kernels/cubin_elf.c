#include "kernels/cubin_elf.h"

#include <stdint.h>
#include <string.h>

/* .nv.info entries: a format byte, an attribute byte, a 16-bit value or
 * payload size, then (format SVAL) the payload. REGCOUNT and FRAME_SIZE
 * carry (symbol index, value) as two 32-bit words. */
enum { EIFMT_SVAL = 0x04, EIATTR_FRAME_SIZE = 0x11, EIATTR_REGCOUNT = 0x2f };
enum { SHT_SYMTAB = 2 };

static uint16_t u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const unsigned char *p) { return (uint32_t)u16(p) | (uint32_t)u16(p + 2) << 16; }
static uint64_t u64(const unsigned char *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

typedef struct section {
    uint32_t name, type, link;
    uint64_t off, size, entsize;
} section;

static int section_at(const unsigned char *b, size_t len, uint64_t shoff, uint16_t i, section *s) {
    /* no sum that can wrap: shoff comes from the file */
    uint64_t o = (uint64_t)i * 64;
    if (shoff > len || o > len - shoff || len - shoff - o < 64) return -1;
    const unsigned char *h = b + shoff + o;
    s->name = u32(h);
    s->type = u32(h + 4);
    s->off = u64(h + 0x18);
    s->size = u64(h + 0x20);
    s->link = u32(h + 0x28);
    s->entsize = u64(h + 0x38);
    if (s->off > len || s->size > len - s->off) return -1;
    return 0;
}

/* The NUL-terminated string at `off` of string section `st`, or NULL. */
static const char *str_at(const unsigned char *b, const section *st, uint64_t off) {
    if (off >= st->size) return NULL;
    const char *s = (const char *)b + st->off + off;
    return memchr(s, '\0', st->size - off) ? s : NULL;
}

int tt__cubin_elf_report(const void *cubin, size_t len, const char *entry, tt__report *r) {
    const unsigned char *b = cubin;
    if (!b || len < 64 || memcmp(b, "\177ELF", 4) != 0 || b[4] != 2 /* ELFCLASS64 */) return TT_ERR_CORRUPT;
    uint64_t shoff = u64(b + 0x28);
    uint16_t shentsize = u16(b + 0x3a), shnum = u16(b + 0x3c), shstrndx = u16(b + 0x3e);
    section shstr, s;
    if (shentsize != 64 || shstrndx >= shnum || section_at(b, len, shoff, shstrndx, &shstr) < 0)
        return TT_ERR_CORRUPT;

    /* the entry's index in the symbol table */
    int64_t sym = -1;
    for (uint16_t i = 0; i < shnum && sym < 0; i++) {
        section strtab;
        if (section_at(b, len, shoff, i, &s) < 0) return TT_ERR_CORRUPT;
        if (s.type != SHT_SYMTAB || s.entsize < 24 || s.link >= shnum ||
            section_at(b, len, shoff, (uint16_t)s.link, &strtab) < 0)
            continue;
        for (uint64_t k = 0; k < s.size / s.entsize; k++) {
            const char *n = str_at(b, &strtab, u32(b + s.off + k * s.entsize));
            if (n && strcmp(n, entry) == 0) {
                sym = (int64_t)k;
                break;
            }
        }
    }
    if (sym < 0) return TT_ERR_NOTFOUND;

    int64_t regs = -1, frame = 0;
    for (uint16_t i = 0; i < shnum; i++) {
        if (section_at(b, len, shoff, i, &s) < 0) return TT_ERR_CORRUPT;
        const char *n = str_at(b, &shstr, s.name);
        if (!n || strncmp(n, ".nv.info", 8) != 0) continue;
        const unsigned char *p = b + s.off, *end = p + s.size;
        while (end - p >= 4) {
            uint8_t fmt = p[0], attr = p[1];
            uint16_t v = u16(p + 2);
            p += 4;
            if (fmt != EIFMT_SVAL) continue;
            if (v > end - p) return TT_ERR_CORRUPT;
            if (v == 8 && u32(p) == (uint32_t)sym) {
                if (attr == EIATTR_REGCOUNT) regs = u32(p + 4);
                else if (attr == EIATTR_FRAME_SIZE) frame = u32(p + 4);
            }
            p += v;
        }
    }
    if (regs <= 0) return TT_ERR_NOTFOUND;
    if (regs > INT32_MAX || frame > INT32_MAX) return TT_ERR_CORRUPT;
    r->registers = (int32_t)regs;
    r->stack_frame = (int32_t)frame;
    r->spill_stores = r->spill_loads = 0;
    return 0;
}
