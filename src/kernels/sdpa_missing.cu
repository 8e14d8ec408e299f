// Embedded in place of sdpa_mma.cu when the library was built without it.
#error "this libtiletune was built without src/kernels/sdpa_mma.cu: set TILETUNE_KERNEL_SOURCE to a kernel source file"
