#include "tuner/daemon/rev.h"

#include <string.h>

/* TT_HAVE_KERNELS: the kernels layer is linked in (CMakeLists.txt). A weak
 * reference would not do: it does not pull an archive member in. */
void tt_builtin_kernel_rev(char out[TT_ID_MAX]) {
#ifdef TT_HAVE_KERNELS
    if (tt_kernel_revision(out) == 0 && out[0]) return;
#endif
    strcpy(out, "0");
}
