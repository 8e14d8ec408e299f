/*
 * What programmatic dependent launch (PDL) buys a short decode call on
 * this GPU, before any kernel of ours takes it: a CUDA graph of pairs
 * (a producer that writes what the call reads, as a rotary or KV-append
 * kernel does before attention; then a consumer shaped as batch-1 decode
 * over 1k keys: 128 CTAs, 32 KB of a cold 4 MB each), timed per pair:
 *
 *   plain      both launched as usual
 *   pdl        the consumer launched with programmatic stream
 *              serialization; it waits (griddepcontrol.wait) before its
 *              first load, and the producer never triggers (as a kernel
 *              of another library would not)
 *   pdl+early  the producer also triggers its dependents at its start
 *   self       consumers back to back, plain, then with PDL each
 *              triggering at its start (a decode call after a decode call)
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/pdl_probe bench/dev/pdl_probe.cu && /tmp/pdl_probe
 *
 * Prints the median of 15 replays, microseconds a pair (or a call). A
 * development tool: not built by CMake, not part of the product.
 */
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#define CK(x)                                                                                              \
    do {                                                                                                   \
        cudaError_t e_ = (x);                                                                              \
        if (e_ != cudaSuccess) {                                                                           \
            std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                                           \
            return 1;                                                                                      \
        }                                                                                                  \
    } while (0)

constexpr int COPIES = 64;            /* 64 x 4 MB: past the 50 MB L2 */
constexpr size_t KV = 4u << 20;       /* batch-1 decode over 1k keys, d128 bf16, 8 KV heads: K and V */
constexpr int CTAS = 128, THREADS = 128;
constexpr size_t PER_CTA = KV / CTAS; /* 32 KB: one 64-key tile of K and of V */
constexpr int PAIRS = 40, REPLAYS = 15;

__global__ void producer(float4 *q, int n, int early) {
    if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* the consumer before it may still read q */
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) q[i] = make_float4(i, i + 1, i + 2, i + 3);
}

__global__ void consumer(const float4 *kv, const float4 *q, float *out, int early) {
    __shared__ float red[THREADS / 32];
    if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const float4 *src = kv + blockIdx.x * (PER_CTA / 16);
    float4 qq = q[threadIdx.x];
    float acc = 0.f;
#pragma unroll 4
    for (size_t j = threadIdx.x; j < PER_CTA / 16; j += THREADS) {
        float4 x = __ldcg(src + j);
        acc += x.x * qq.x + x.y * qq.y + x.z * qq.z + x.w * qq.w;
    }
    for (int s = 16; s; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = red[0] + red[1] + red[2] + red[3];
}

/* A launch of `grid` x `threads` on `s`, with programmatic stream
 * serialization where `pdl` (the attribute lives in *a). */
static cudaLaunchConfig_t launch_config(int grid, int threads, cudaStream_t s, bool pdl, cudaLaunchAttribute *a) {
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(grid);
    c.blockDim = dim3(threads);
    c.stream = s;
    a->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a->val.programmaticStreamSerializationAllowed = 1;
    c.attrs = a;
    c.numAttrs = pdl ? 1 : 0;
    return c;
}

static cudaError_t launch_consumer(cudaStream_t s, bool pdl, const float4 *kv, const float4 *q, float *out,
                                   int early) {
    cudaLaunchAttribute a;
    cudaLaunchConfig_t c = launch_config(CTAS, THREADS, s, pdl, &a);
    return cudaLaunchKernelEx(&c, consumer, kv, q, out, early);
}

static cudaError_t launch_producer(cudaStream_t s, bool pdl, float4 *q, int early) {
    cudaLaunchAttribute a;
    cudaLaunchConfig_t c = launch_config(8, 256, s, pdl, &a);
    return cudaLaunchKernelEx(&c, producer, q, 2048, early);
}

int main() {
    char *kv;
    float4 *q;
    float *out;
    CK(cudaMalloc(&kv, KV * COPIES));
    CK(cudaMemset(kv, 0, KV * COPIES));
    CK(cudaMalloc(&q, 2048 * sizeof(float4)));
    CK(cudaMalloc(&out, CTAS * sizeof(float)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct mode {
        const char *name;
        bool producer, pdl;
        int early;
    } modes[] = {{"plain", true, false, 0},
                 {"pdl", true, true, 0},
                 {"pdl+early", true, true, 1},
                 {"self plain", false, false, 0},
                 {"self pdl+early", false, true, 1}};
    for (int round = 0; round < 2; round++)
        for (const mode &m : modes) {
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < PAIRS; i++) {
                const float4 *src = (const float4 *)(kv + (i % COPIES) * KV);
                if (m.producer) CK(launch_producer(s, m.pdl && m.early, q, m.early));
                CK(launch_consumer(s, m.pdl, src, q, out, m.early));
            }
            CK(cudaStreamEndCapture(s, &g));
            cudaGraphExec_t x;
            CK(cudaGraphInstantiate(&x, g, 0));
            cudaEvent_t a, b;
            CK(cudaEventCreate(&a));
            CK(cudaEventCreate(&b));
            std::vector<float> t;
            for (int r = 0; r < REPLAYS + 3; r++) {
                CK(cudaEventRecord(a, s));
                CK(cudaGraphLaunch(x, s));
                CK(cudaEventRecord(b, s));
                CK(cudaEventSynchronize(b));
                float ms;
                CK(cudaEventElapsedTime(&ms, a, b));
                if (r >= 3) t.push_back(ms * 1000.f / PAIRS);
            }
            std::sort(t.begin(), t.end());
            std::printf("round %d %-16s %6.2f us a %s (range %.2f-%.2f)\n", round, m.name, t[t.size() / 2],
                        m.producer ? "pair" : "call", t.front(), t.back());
            cudaGraphExecDestroy(x);
            cudaGraphDestroy(g);
        }
    return 0;
}
