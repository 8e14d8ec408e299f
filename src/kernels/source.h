/*
 * The kernel source in use and its revision.
 *
 * The SDPA source is embedded in libtiletune at build time: the root
 * sdpa.cu and the named headers NVRTC gets with it (tt__source_headers:
 * the contract sdpa_params.h, the shared skeleton.cuh and every family's
 * device files). $TILETUNE_KERNEL_SOURCE names an edited copy of the .cu
 * file instead, so a user can change the schedule and re-tune without
 * rebuilding. The revision is the FNV-1a hash of the .cu text and of every
 * header in tt__source_headers' order: the daemon and the store key records
 * by it, and the cubin cache keys entries by it.
 */
#ifndef TT_KERNELS_SOURCE_H
#define TT_KERNELS_SOURCE_H

#include <stddef.h>

#include "tiletune.h"

/* Environment variable naming an edited copy of the kernel source. */
#define TT_KERNEL_SOURCE_ENV "TILETUNE_KERNEL_SOURCE"

typedef struct tt__source {
    char *text; /* NUL-terminated .cu text, owned */
    size_t len;
    char origin[256];    /* "embedded" or the file's path */
    char rev[TT_ID_MAX]; /* hex revision */
} tt__source;

/* The process's source: the file named by $TILETUNE_KERNEL_SOURCE when set
 * and non-empty, else the embedded one. Resolved once per process; an
 * unreadable file is an error (TT_ERR_NOTFOUND / TT_ERR_IO) every time,
 * never a silent fall-back to the embedded source. The result is owned by
 * the library and lives until exit. */
int tt__source_default(const tt__source **out, char *err, size_t errlen);

/* Reads an edited copy from `path`. The caller frees it. */
int tt__source_load(const char *path, tt__source **out, char *err, size_t errlen);
/* A source from text in memory (tests, tools). The caller frees it. */
int tt__source_from_text(const char *text, size_t len, const char *origin, tt__source **out);
void tt__source_free(tt__source *s);

/* The reference kernel (embedded sdpa_ref.cu: fp32, one warp per query
 * row, obviously correct, slow) and the config to compile and launch it
 * with; it honours only block_m and warps of it. Owned by the library. */
int tt__source_reference(const tt__source **out, char *err, size_t errlen);
void tt__reference_config(tt_config *out);

/* The named headers of every kernel program, in the revision's order:
 * sdpa_params.h, skeleton.cuh, then each family's files (table order). */
typedef struct tt__source_header {
    const char *name;
    const char *text;
    size_t len;
} tt__source_header;
size_t tt__source_headers(const tt__source_header **out);

#endif
