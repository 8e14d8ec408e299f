/* The compile report read from a cubin itself: ptxas records each kernel's
 * register count and stack frame in the ELF's .nv.info attributes. This is
 * what the space relies on when NVRTC's log carries no ptxas report (seen
 * on the H200 machine: successful compiles with an empty log). */
#ifndef TT_KERNELS_CUBIN_ELF_H
#define TT_KERNELS_CUBIN_ELF_H

#include <stddef.h>

#include "kernels/jit.h"

/* Registers and stack frame of kernel `entry` in `cubin` into r (other
 * fields untouched; spills are not recorded separately in the cubin, they
 * are part of the stack frame). 0, or TT_ERR_CORRUPT when the image is not
 * an ELF64 cubin, TT_ERR_NOTFOUND when it has no such kernel or no
 * register count for it. */
int tt__cubin_elf_report(const void *cubin, size_t len, const char *entry, tt__report *r);

#endif
