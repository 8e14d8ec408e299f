/* Content hashes that name things: kernel revisions, GPU fingerprints,
 * cache entries. FNV-1a 64: stable across builds and hosts; these names
 * identify content we produce, they are not a defence against forgery. */
#ifndef TT_COMMON_HASH_H
#define TT_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TT_HASH_INIT UINT64_C(0xcbf29ce484222325)

uint64_t tt__hash_update(uint64_t h, const void *data, size_t len);
uint64_t tt__hash_str(uint64_t h, const char *s); /* includes the NUL */
/* 16 lowercase hex digits + NUL into out (17 bytes). */
void tt__hash_hex(uint64_t h, char out[17]);

#endif
