// Clusters of c CTAs (1..16) the device holds at once, for a kernel of
// 128 or 256 threads and 40-200 KB of dynamic shared memory
// (cudaOccupancyMaxActiveClusters). nvcc -arch=sm_90 -o occ cluster-occupancy.cu
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(float *o) { extern __shared__ float s[]; s[threadIdx.x] = 1; __syncthreads(); if (o) o[0] = s[1]; }
int main() {
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  cudaDeviceProp pr; cudaGetDeviceProperties(&pr, 0); printf("SMs %d\n", pr.multiProcessorCount);
  int sm[] = {40, 70, 100, 132, 200};
  for (int t : {128, 256}) for (int S : sm) {
    printf("threads %d smem %dKB:", t, S);
    for (int c = 1; c <= 16; ++c) {
      cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute at; at.id = cudaLaunchAttributeClusterDimension;
      at.val.clusterDim.x = c; at.val.clusterDim.y = 1; at.val.clusterDim.z = 1;
      cfg.gridDim = dim3(c, 1, 1); cfg.blockDim = dim3(t, 1, 1); cfg.dynamicSmemBytes = S * 1024; cfg.attrs = &at; cfg.numAttrs = 1;
      int n = -1; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
      printf(" %d:%d%s", c, n, e ? "!" : "");
    }
    printf("\n");
  }
}
