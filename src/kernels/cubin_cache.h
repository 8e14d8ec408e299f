/*
 * A disk cache of compiled kernels: one file per entry, <dir>/<key>.bin.
 *
 * An entry is a header (magic, lengths, FNV-1a checksum), the entry's
 * identity text (what was compiled: revision, NVRTC version, arch, macros)
 * and the payload. A reader trusts an entry only if its length, checksum
 * and identity all match, so a truncated, bit-flipped or colliding file is
 * a miss (and is removed), never a bad cubin handed to the driver.
 *
 * Writers never expose half-written entries: the entry goes to a temporary
 * file in the same directory, is fsync'ed and renamed over the final name.
 * Any number of threads and processes may read and write at once; two that
 * write the same key both write a complete entry and the last rename wins.
 */
#ifndef TT_KERNELS_CUBIN_CACHE_H
#define TT_KERNELS_CUBIN_CACHE_H

#include <stddef.h>

#define TT_CUBIN_CACHE_DIR_ENV "TILETUNE_CACHE_DIR"

/*
 * The cache directory, created (mode 0700) if missing: `dir` when non-NULL
 * and non-empty, else $TILETUNE_CACHE_DIR, else $XDG_CACHE_HOME/tiletune,
 * else $HOME/.cache/tiletune. TT_ERR_IO with a message when it cannot be
 * created; TT_ERR_PERM when it is not trusted: not owned by this uid, or
 * under a directory another user owns or may write (without the sticky
 * bit). A directory of ours that others may write is repaired (chmod
 * go-w) and err says so while 0 is returned.
 */
int tt__cubin_cache_dir(const char *dir, char *out, size_t outlen, char *err, size_t errlen);

/*
 * Reads the entry `key` (a file-name-safe string) whose identity must equal
 * `ident`. Returns 0 and a malloc'ed payload (the caller frees it),
 * TT_ERR_NOTFOUND when there is no entry, or TT_ERR_CORRUPT when there was
 * an entry that failed a check (including: a symlink, not owned by this
 * uid, writable by group or others); that entry has been removed.
 */
int tt__cubin_cache_get(const char *dir, const char *key, const char *ident, void **payload, size_t *len);

/* Writes the entry atomically. TT_ERR_IO with a message on failure (the
 * cache is then simply not used for this entry). */
int tt__cubin_cache_put(const char *dir, const char *key, const char *ident, const void *payload, size_t len,
                        char *err, size_t errlen);

/* The path of an entry (tests corrupt entries through it). */
int tt__cubin_cache_path(const char *dir, const char *key, char *out, size_t outlen);

#endif
