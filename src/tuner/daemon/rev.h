/* The kernel revision the daemon reports before a worker has said hello. */
#ifndef TT_TUNER_REV_H
#define TT_TUNER_REV_H

#include "tiletune.h"

/*
 * The kernel revision (the FNV-1a hash of the kernel source, src/common/
 * hash.h) that the kernels layer linked into this binary reports, as hex;
 * "0" when the binary carries no kernels. The one place where the daemon
 * learns its own revision: a worker's HELLO overrides it.
 */
void tt_builtin_kernel_rev(char out[TT_ID_MAX]);

#endif
