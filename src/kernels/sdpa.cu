/*
 * SDPA forward: the root of every variant's program. The shared skeleton
 * (skeleton.cuh) and the family's mainloop, named by TT_MAINLOOP (the JIT
 * defines it from the family's descriptor, e.g. "mma/mainloop.cuh"), are
 * NVRTC named headers embedded beside this file; the kernel revision
 * hashes all of them. A mainloop includes what it is built over (the
 * skeleton, or splitkv's own contract splitkv/params.h), so this root
 * names only the mainloop. An edited copy of this file
 * ($TILETUNE_KERNEL_SOURCE) may include them or replace them with its own
 * text.
 */
#include "sdpa_params.h"

#ifndef TT_MAINLOOP
#error "TT_MAINLOOP must name the family's mainloop header"
#endif
#include TT_MAINLOOP
