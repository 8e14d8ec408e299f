/*
 * How fast can a CTA an SM stream a decode-sized KV cache through shared
 * memory on this GPU, by each copy path? The splitkv decode kernel reads
 * 4.2-4.26 TB/s on the H200 where cuDNN reads 4.5-4.6 (docs/perf.md);
 * this separates the copy path's own ceiling from the kernel's math and
 * synchronisation:
 *
 *   cpasync   16 bytes a thread (cp.async.cg, L2 prefetch 128 or 256 B),
 *             as the splitkv kernel copies today; with 128 B also into
 *             272-byte rows (splitkv's padded tile) and into 256-byte
 *             rows with the chunk index XOR-ed by the row: ncu put 1.5x
 *             the L2 sectors on splitkv's copies, which these isolate;
 *   bulk      one cp.async.bulk of a whole K or V tile (its rows are
 *             contiguous in a contiguous cache), an mbarrier a stage;
 *   tensor    2-D tensor-map copies (cp.async.bulk.tensor, 128-byte
 *             swizzle, 64-column boxes), as family ws loads K and V.
 *
 * No math: every thread folds the 16-byte words of each tile it would read
 * into one word, so the copies are not dead. K and V of 2 GiB in all (the
 * B16 x 8 KV heads x 32k x d128 bf16 decode shape), each CTA a contiguous
 * run of 64- or 128-row tiles, 2-4 stages of K and V.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/kv_stream bench/dev/kv_stream.cu && /tmp/kv_stream
 *
 * Prints one line a (path, CTAs, stages): the median of 20 timed passes,
 * TB/s. A development tool: not built by CMake, not part of the product.
 *
 * `kv_stream tail`: the end of a stream instead. At batch 1 the decode
 * kernel streams 0.5 GB (128k keys), a quarter of the run above, so the
 * spread of the CTAs' finishing times weighs four times as much. The XOR-ed
 * cp.async copy of 128-row tiles, 3 stages (the 16x128 s3 decode tile),
 * over 64 MB to 2 GiB, each CTA given a fixed run of tiles (as splitkv's
 * splits are) or taking chunks of tiles from a counter until none are
 * left; per pass, each CTA's start and end on the global timer. Prints the
 * median pass's time and how far its CTAs' ends trail the median end.
 * `kv_stream tail-units`: fixed runs over every SM again, but each CTA
 * within one of 8 or 128 equal units (splits of 16 and 17 CTAs a unit),
 * as a decode grid whose splits differ by unit would run.
 * `kv_stream hints`: the copy's L2 qualifiers (prefetch size, an
 * evict-first policy) and two CTAs an SM, as cuDNN's decode kernel runs.
 * `kv_stream order`: the order each CTA walks its run in (from its start,
 * rotated, odd CTAs backwards; and the CTAs side by side as a reference).
 */
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(x)                                                                                \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

constexpr int D = 128;       /* head dim, bf16 */
constexpr int THREADS = 256; /* 8 warps, as the 16x128 decode tile */

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* what a consumer reads of a stage: its own 16-byte words of K and V */
template <int BN> __device__ __forceinline__ unsigned fold(const uint4 *k, const uint4 *v) {
    unsigned a = 0;
#pragma unroll
    for (int i = 0; i < BN * D * 2 / 16 / THREADS; ++i) {
        const uint4 x = k[threadIdx.x + i * THREADS], y = v[threadIdx.x + i * THREADS];
        a ^= x.x ^ x.w ^ y.y ^ y.z;
    }
    return a;
}

/* the dynamic shared memory, 1024-byte aligned (the 128-byte swizzle's
 * unit; the launch adds 1024 bytes for it) */
__device__ __forceinline__ uint4 *aligned_smem() {
    extern __shared__ uint4 dyn[];
    const unsigned a = smem_u32(dyn);
    return dyn + (((a + 1023u) & ~1023u) - a) / 16;
}

/* LAY: where a K/V row's sixteen 16-byte chunks land in shared memory.
 * 0: rows back to back (256 bytes); 1: 272-byte rows, as the splitkv
 * kernel pads them so its ldmatrix rows fall in distinct banks; 2: 256-byte
 * rows, chunk c of row r at c ^ (r % 8) (the same bank spread, no padding). */
template <int LAY> __host__ __device__ constexpr int row_bytes() { return LAY == 1 ? (D + 8) * 2 : D * 2; }

template <int BN, int ST, int HINT, int LAY = 0>
__global__ void __launch_bounds__(THREADS)
    k_cpasync(const char *K, const char *V, long long tiles, unsigned *out) {
    constexpr int TILE = BN * D * 2, CHUNKS = TILE / 16, PER_THREAD = CHUNKS / THREADS;
    constexpr int STILE = BN * row_bytes<LAY>(); /* a K or V tile's shared bytes */
    uint4 *sm = aligned_smem();
    const long long t0 = tiles * blockIdx.x / gridDim.x, t1 = tiles * (blockIdx.x + 1) / gridDim.x;
    auto issue = [&](long long t, int s) {
        if (t < t1) {
            const char *k = K + t * TILE, *v = V + t * TILE;
            const unsigned dk = smem_u32(sm) + (unsigned)(s * 2 * STILE), dv = dk + STILE;
#pragma unroll
            for (int i = 0; i < PER_THREAD; ++i) {
                const int c = threadIdx.x + i * THREADS, r = c / (D / 8), ch = c % (D / 8);
                const unsigned o = r * row_bytes<LAY>() + (LAY == 2 ? (ch ^ (r & 7)) : ch) * 16;
                if (HINT == 256) {
                    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dk + o),
                                 "l"(k + c * 16));
                    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dv + o),
                                 "l"(v + c * 16));
                } else if (HINT == 0) {
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dk + o),
                                 "l"(k + c * 16));
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dv + o),
                                 "l"(v + c * 16));
                } else if (HINT == 1 || HINT == 2) {
                    /* lines read once: first out of L2 (1: with the 128-byte prefetch) */
                    unsigned long long pol;
                    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
                    if (HINT == 1) {
                        asm volatile(
                            "cp.async.cg.shared.global.L2::cache_hint.L2::128B [%0], [%1], 16, %2;\n" ::"r"(
                                dk + o),
                            "l"(k + c * 16), "l"(pol));
                        asm volatile(
                            "cp.async.cg.shared.global.L2::cache_hint.L2::128B [%0], [%1], 16, %2;\n" ::"r"(
                                dv + o),
                            "l"(v + c * 16), "l"(pol));
                    } else {
                        asm volatile(
                            "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dk + o),
                            "l"(k + c * 16), "l"(pol));
                        asm volatile(
                            "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dv + o),
                            "l"(v + c * 16), "l"(pol));
                    }
                } else {
                    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dk + o),
                                 "l"(k + c * 16));
                    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dv + o),
                                 "l"(v + c * 16));
                }
            }
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    for (int s = 0; s < ST - 1; ++s) issue(t0 + s, s);
    unsigned acc = 0;
    for (long long t = t0; t < t1; ++t) {
        const int s = (int)((t - t0) % ST);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 2));
        __syncthreads(); /* every thread's copies of stage s landed; stage s-1 is free */
        issue(t + ST - 1, (int)((t - t0 + ST - 1) % ST));
        acc ^= fold<BN>(sm + (size_t)s * 2 * STILE / 16, sm + ((size_t)s * 2 + 1) * STILE / 16);
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc; /* never, in practice: keeps the reads */
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned phase) {
    asm volatile(
        "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::
            "r"(bar),
        "r"(phase)
        : "memory");
}

/* MODE 0: one 1-D bulk copy a K or V tile; 1: 2-D tensor-map boxes */
template <int BN, int ST, int MODE>
__global__ void __launch_bounds__(THREADS)
    k_bulk(const char *K, const char *V, const __grid_constant__ CUtensorMap tk,
           const __grid_constant__ CUtensorMap tv, long long tiles, unsigned *out) {
    constexpr int TILE = BN * D * 2, CHUNKS = TILE / 16;
    uint4 *sm = aligned_smem();
    __shared__ __align__(8) unsigned long long bars[ST];
    const long long t0 = tiles * blockIdx.x / gridDim.x, t1 = tiles * (blockIdx.x + 1) / gridDim.x;
    const unsigned bar0 = smem_u32(bars);
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; ++s) mbar_init(bar0 + 8 * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::);
    }
    __syncthreads();
    auto issue = [&](long long t, int s) {
        if (threadIdx.x != 0 || t >= t1) return;
        const unsigned dk = smem_u32(sm + (size_t)s * 2 * CHUNKS), dv = dk + TILE, bar = bar0 + 8 * s;
        mbar_expect_tx(bar, 2 * TILE);
        if (MODE == 0) {
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
                    "r"(dk),
                "l"(K + t * TILE), "r"(TILE), "r"(bar)
                : "memory");
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
                    "r"(dv),
                "l"(V + t * TILE), "r"(TILE), "r"(bar)
                : "memory");
        } else {
            const int row = (int)(t * BN);
#pragma unroll
            for (int pn = 0; pn < D / 64; ++pn) { /* 64-column panels of BN x 128 bytes */
                asm volatile(
                    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                    "%3}], [%4];\n" ::"r"(dk + pn * BN * 128),
                    "l"(&tk), "r"(pn * 64), "r"(row), "r"(bar)
                    : "memory");
                asm volatile(
                    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                    "%3}], [%4];\n" ::"r"(dv + pn * BN * 128),
                    "l"(&tv), "r"(pn * 64), "r"(row), "r"(bar)
                    : "memory");
            }
        }
    };
    for (int s = 0; s < ST - 1; ++s) issue(t0 + s, s);
    unsigned acc = 0;
    for (long long t = t0; t < t1; ++t) {
        const long long i = t - t0;
        const int s = (int)(i % ST);
        mbar_wait(bar0 + 8 * s, (unsigned)((i / ST) & 1));
        __syncthreads(); /* everyone is past stage s-1's reads: refill it */
        issue(t + ST - 1, (int)((i + ST - 1) % ST));
        acc ^= fold<BN>(sm + (size_t)s * 2 * CHUNKS, sm + (size_t)s * 2 * CHUNKS + CHUNKS);
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}

typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                              const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                              CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                              CUtensorMapFloatOOBfill);

static CUtensorMap tensor_map(encode_fn enc, void *base, long long rows, unsigned bn) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)D, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)D * 2};
    const cuuint32_t box[2] = {64, bn}, elem[2] = {1, 1};
    CUresult r = enc(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, elem,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", (int)r);
        exit(1);
    }
    return m;
}

template <typename F> static double median_ms(F launch, int passes) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    launch(); /* warm-up */
    CHECK(cudaDeviceSynchronize());
    std::vector<float> ts;
    for (int i = 0; i < passes; ++i) {
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    CHECK(cudaGetLastError());
    return ts[ts.size() / 2];
}

static encode_fn encode;
static char *K, *V;
static unsigned *out;
static const long long BYTES = 1ll << 30; /* each of K and V */
static int sms;

static void report(const char *path, int bn, int ctas, int st, double ms) {
    const int smem_kib = st * 2 * bn * D * 2 / 1024;
    printf("%-14s %3d-row tiles, %d stages (%3d KiB), %4d CTAs: %7.4f ms %6.3f TB/s\n", path, bn, st,
           smem_kib, ctas, ms, 2.0 * BYTES / (ms * 1e-3) / 1e12);
}

/* every path at one tile height and stage count, on the grids that fit */
template <int BN, int ST> static void run_all() {
    constexpr int TILE = BN * D * 2;
    const long long tiles = BYTES / TILE;
    const CUtensorMap tk = tensor_map(encode, K, tiles * BN, BN), tv = tensor_map(encode, V, tiles * BN, BN);
    const size_t smem = (size_t)ST * 2 * TILE + 1024, smem_pad = (size_t)ST * 2 * BN * row_bytes<1>() + 1024;
    CHECK(cudaFuncSetAttribute(k_cpasync<BN, ST, 128, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)smem_pad));
    CHECK(cudaFuncSetAttribute(k_cpasync<BN, ST, 128, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)smem));
    CHECK(
        cudaFuncSetAttribute(k_cpasync<BN, ST, 128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CHECK(
        cudaFuncSetAttribute(k_cpasync<BN, ST, 256>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CHECK(cudaFuncSetAttribute(k_bulk<BN, ST, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CHECK(cudaFuncSetAttribute(k_bulk<BN, ST, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    /* one CTA an SM; 128 CTAs (the B16 x 8 KV heads decode grid); as
     * many an SM as the shared memory holds (the H200: 227 KiB a CTA,
     * 228 KiB an SM) */
    const int per_sm = (int)std::max<size_t>(1, (228 * 1024) / (smem + 1024));
    int grids[3] = {sms, 128, per_sm * sms};
    const int n = per_sm > 1 ? 3 : 2;
    for (int i = 0; i < n; ++i) {
        const int g = grids[i];
        report("cpasync L2:128", BN, g, ST,
               median_ms([&] { k_cpasync<BN, ST, 128><<<g, THREADS, smem>>>(K, V, tiles, out); }, 20));
        report("cpasync pad272", BN, g, ST,
               median_ms([&] { k_cpasync<BN, ST, 128, 1><<<g, THREADS, smem_pad>>>(K, V, tiles, out); }, 20));
        report("cpasync xor", BN, g, ST,
               median_ms([&] { k_cpasync<BN, ST, 128, 2><<<g, THREADS, smem>>>(K, V, tiles, out); }, 20));
        report("cpasync L2:256", BN, g, ST,
               median_ms([&] { k_cpasync<BN, ST, 256><<<g, THREADS, smem>>>(K, V, tiles, out); }, 20));
        report("bulk 1-D", BN, g, ST,
               median_ms([&] { k_bulk<BN, ST, 0><<<g, THREADS, smem>>>(K, V, tk, tv, tiles, out); }, 20));
        report("tensor 2-D", BN, g, ST,
               median_ms([&] { k_bulk<BN, ST, 1><<<g, THREADS, smem>>>(K, V, tk, tv, tiles, out); }, 20));
    }
}

/* The XOR-ed cp.async copy (128-byte L2 prefetch) of K and V tile t,
 * 128 rows, into ring stage s: the 16x128 decode tile's copy */
__device__ __forceinline__ void copy_xor128(uint4 *sm, const char *K, const char *V, long long t, int s) {
    constexpr int TILE = 128 * D * 2, PER_THREAD = TILE / 16 / THREADS;
    const char *k = K + t * TILE, *v = V + t * TILE;
    const unsigned dk = smem_u32(sm) + (unsigned)(s * 2 * TILE), dv = dk + TILE;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        const int c = threadIdx.x + i * THREADS, r = c / (D / 8), ch = c % (D / 8);
        const unsigned o = r * D * 2 + (ch ^ (r & 7)) * 16;
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dk + o), "l"(k + c * 16));
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dv + o), "l"(v + c * 16));
    }
}

/* The tile a CTA streams next, or -1: a fixed run [t0, t1) when CHUNK is
 * 0 or negative, else chunks of CHUNK tiles taken from ctr[0] (thread 0
 * only). */
template <int CHUNK> struct tile_source {
    long long cur, end, tiles;
    unsigned long long *ctr;
    __device__ long long next() {
        if (cur < end) return cur++;
        if (CHUNK <= 0 || end >= tiles) return -1;
        cur = (long long)atomicAdd(ctr, 1ull) * CHUNK;
        if (cur >= tiles) {
            end = tiles;
            return -1;
        }
        end = cur + CHUNK < tiles ? cur + CHUNK : tiles;
        return cur++;
    }
};

template <int CHUNK>
__global__ void __launch_bounds__(THREADS)
    k_tail(const char *K, const char *V, long long tiles, unsigned long long *ctr, unsigned long long *when,
           unsigned *out) {
    constexpr int BN = 128, ST = 3, STILE = BN * D * 2;
    uint4 *sm = aligned_smem();
    __shared__ long long slot[ST]; /* the tile each ring stage holds or will hold */
    unsigned long long t_start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_start));
    tile_source<CHUNK> src;
    src.tiles = tiles;
    src.ctr = ctr;
    src.cur = CHUNK > 0 ? 0 : tiles * blockIdx.x / gridDim.x;
    src.end = CHUNK > 0 ? 0 : tiles * (blockIdx.x + 1) / gridDim.x;
    if (CHUNK < 0) {
        /* -CHUNK units of equal tiles (batch x KV heads), each CTA within
         * one: a unit's CTAs consecutive, the CTAs dealt as evenly as they
         * go (16 or 17 a unit for 8 units on 132), so every SM is busy and
         * the units' splits differ by one */
        const long long U = CHUNK < 0 ? -CHUNK : 1, C = gridDim.x, c = blockIdx.x, per = tiles / U;
        const long long u = c * U / C, f0 = (u * C + U - 1) / U, f1 = ((u + 1) * C + U - 1) / U;
        src.cur = u * per + per * (c - f0) / (f1 - f0);
        src.end = u * per + per * (c - f0 + 1) / (f1 - f0);
    }
    auto issue = [&](long long t, int s) {
        if (t >= 0) copy_xor128(sm, K, V, t, s);
        asm volatile("cp.async.commit_group;\n" ::);
    };
    if (threadIdx.x == 0)
        for (int s = 0; s < ST; ++s) slot[s] = src.next();
    __syncthreads();
    for (int s = 0; s < ST - 1; ++s) issue(slot[s], s);
    unsigned acc = 0;
    for (int i = 0;; ++i) {
        const int s = i % ST;
        if (slot[s] < 0) break; /* written ST iterations ago, seen since a barrier */
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 2));
        __syncthreads();
        issue(slot[(i + ST - 1) % ST], (i + ST - 1) % ST);
        acc ^= fold<BN>(sm + (size_t)s * 2 * STILE / 16, sm + ((size_t)s * 2 + 1) * STILE / 16);
        if (threadIdx.x == 0)
            slot[s] = src.next(); /* for iteration i + ST; nobody reads slot[s] before then */
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
    if (threadIdx.x == 0) {
        unsigned long long t_end;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_end));
        when[2 * blockIdx.x] = t_start;
        when[2 * blockIdx.x + 1] = t_end;
        if (CHUNK > 0) { /* the last CTA out resets the counters for the next launch */
            __threadfence();
            if (atomicAdd(ctr + 1, 1ull) == gridDim.x - 1) {
                ctr[0] = 0;
                ctr[1] = 0;
            }
        }
    }
}

template <int CHUNK> static void tail_one(const char *name, long long bytes, int ctas) {
    constexpr int TILE = 128 * D * 2;
    const size_t smem = 3 * 2 * (size_t)TILE + 1024;
    CHECK(cudaFuncSetAttribute(k_tail<CHUNK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned long long *ctr, *when;
    CHECK(cudaMalloc(&ctr, 2 * sizeof *ctr));
    CHECK(cudaMemset(ctr, 0, 2 * sizeof *ctr));
    CHECK(cudaMalloc(&when, 2 * (size_t)ctas * sizeof *when));
    const long long tiles = bytes / TILE;
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    struct pass {
        float ms;
        double med_end, p90_end, max_end;
    };
    std::vector<pass> ps;
    std::vector<unsigned long long> w(2 * (size_t)ctas);
    for (int it = 0; it < 31; ++it) {
        CHECK(cudaEventRecord(a));
        k_tail<CHUNK><<<ctas, THREADS, smem>>>(K, V, tiles, ctr, when, out);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        CHECK(cudaMemcpy(w.data(), when, w.size() * sizeof w[0], cudaMemcpyDeviceToHost));
        unsigned long long t0 = ~0ull;
        std::vector<double> ends;
        for (int c = 0; c < ctas; ++c) t0 = std::min(t0, w[2 * c]);
        for (int c = 0; c < ctas; ++c) ends.push_back((double)(w[2 * c + 1] - t0) * 1e-3);
        std::sort(ends.begin(), ends.end());
        if (it > 0) ps.push_back({ms, ends[ends.size() / 2], ends[ends.size() * 9 / 10], ends.back()});
    }
    CHECK(cudaGetLastError());
    std::sort(ps.begin(), ps.end(), [](const pass &x, const pass &y) { return x.ms < y.ms; });
    const pass &m = ps[ps.size() / 2];
    printf("%-12s %7.1f MB %4d CTAs: %8.4f ms %6.3f TB/s  ends (us from first start): median %7.2f p90 %7.2f "
           "last %7.2f (last - median %5.2f)\n",
           name, 2.0 * bytes / 1e6, ctas, m.ms, 2.0 * bytes / (m.ms * 1e-3) / 1e12, m.med_end, m.p90_end,
           m.max_end, m.max_end - m.med_end);
    CHECK(cudaFree(ctr));
    CHECK(cudaFree(when));
}

static int tail_main(bool units) {
    /* K and V bytes each: B1 x 8 KV heads x d128 bf16 at 16k, 32k, 128k keys; then the 2 GiB run above */
    const long long sizes[] = {32ll << 20, 64ll << 20, 256ll << 20, 1ll << 30};
    if (units) {
        /* every SM busy without crossing units: uneven splits of 8 units
         * (batch 1 x 8 KV heads) and of 128 (batch 16 x 8) over 132 CTAs */
        for (int round = 0; round < 3; ++round)
            for (long long bytes : {256ll << 20, 1ll << 30}) {
                tail_one<0>("fixed runs", bytes, 128);
                tail_one<0>("fixed runs", bytes, sms);
                tail_one<-8>("8 units", bytes, sms);
                tail_one<-128>("128 units", bytes, sms);
            }
        return 0;
    }
    for (int round = 0; round < 2; ++round)
        for (long long bytes : sizes)
            for (int ctas : {128, sms}) {
                tail_one<0>("fixed runs", bytes, ctas);
                tail_one<4>("chunks of 4", bytes, ctas);
                tail_one<16>("chunks of 16", bytes, ctas);
            }
    return 0;
}

/* The order a CTA walks its fixed run in. Every decode CTA streams its
 * own contiguous run (a unit: one batch x KV head's K and V), all starting
 * at once at their runs' first tiles, so the 128 streams of the B16 x 32k
 * grid stand 8 MiB apart at every moment. ORDER 0: each run from its
 * start (splitkv's order); 1: each run rotated, CTA i starting i/G of the
 * way in and wrapping (the streams' phases spread over the runs; softmax
 * does not care where a run starts); 2: odd CTAs walk their runs
 * backwards; 3: tile c + k G for CTA c (the CTAs side by side on one
 * front: a reference no decode grid can take, one CTA a unit); 4, 5, 6:
 * rotated by 37c tiles, by (c mod 8) eighths, by c tiles (mod the run). The
 * XOR-ed cp.async copy of 128-row tiles, 3 stages, as k_tail. */
template <int ORDER>
__global__ void __launch_bounds__(THREADS) k_order(const char *K, const char *V, long long tiles, unsigned *out) {
    constexpr int BN = 128, ST = 3, STILE = BN * D * 2;
    uint4 *sm = aligned_smem();
    const long long G = gridDim.x, c = blockIdx.x, t0 = tiles * c / G, t1 = tiles * (c + 1) / G;
    const long long n = ORDER == 3 ? (tiles - c + G - 1) / G : t1 - t0;
    const long long rot = ORDER == 1 ? n * c / G : ORDER == 4 ? c * 37 % n : ORDER == 5 ? (c & 7) * n / 8 : c % n;
    auto tile_at = [&](long long j) -> long long {
        if (ORDER == 1 || ORDER >= 4) return t0 + (j + rot) % n;
        if (ORDER == 2 && (c & 1)) return t1 - 1 - j;
        if (ORDER == 3) return c + j * G;
        return t0 + j;
    };
    auto issue = [&](long long j, int s) {
        if (j < n) copy_xor128(sm, K, V, tile_at(j), s);
        asm volatile("cp.async.commit_group;\n" ::);
    };
    for (int s = 0; s < ST - 1; ++s) issue(s, s);
    unsigned acc = 0;
    for (long long j = 0; j < n; ++j) {
        const int s = (int)(j % ST);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 2));
        __syncthreads();
        issue(j + ST - 1, (int)((j + ST - 1) % ST));
        acc ^= fold<BN>(sm + (size_t)s * 2 * STILE / 16, sm + ((size_t)s * 2 + 1) * STILE / 16);
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}

template <int ORDER> static void order_one(const char *name, long long bytes, int ctas) {
    constexpr int TILE = 128 * D * 2;
    const size_t smem = 3 * 2 * (size_t)TILE + 1024;
    CHECK(cudaFuncSetAttribute(k_order<ORDER>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const long long tiles = bytes / TILE;
    const double ms = median_ms([&] { k_order<ORDER><<<ctas, THREADS, smem>>>(K, V, tiles, out); }, 30);
    printf("%-16s %7.1f MB %4d CTAs: %8.4f ms %6.3f TB/s\n", name, 2.0 * bytes / 1e6, ctas, ms,
           2.0 * bytes / (ms * 1e-3) / 1e12);
}

static int order_main() {
    for (int round = 0; round < 3; ++round)
        for (long long bytes : {256ll << 20, 1ll << 30})
            for (int ctas : {128, sms}) {
                order_one<0>("from the start", bytes, ctas);
                order_one<1>("rotated", bytes, ctas);
                order_one<2>("odd backwards", bytes, ctas);
                order_one<3>("side by side", bytes, ctas);
                order_one<4>("rotated 37c", bytes, ctas);
                order_one<5>("rotated c%8 8ths", bytes, ctas);
                order_one<6>("rotated c", bytes, ctas);
            }
    return 0;
}

/* The cp.async's cache qualifiers on the XOR-ed tile, 0.5 and 2 GiB: the
 * 128-byte L2 prefetch (splitkv's), none, 256 bytes, and an evict-first
 * L2 policy with and without the prefetch; one CTA an SM (128-row tiles,
 * 3 stages) on every SM and on 128, and two an SM (64-row tiles, 3
 * stages), the way cuDNN's decode kernel runs (16x128 tiles, 4 warps,
 * 86 KiB, two CTAs an SM; ncu on the H200). Rounds alternate. */
template <int BN, int ST, int HINT> static void hint_one(const char *name, long long bytes, int ctas) {
    constexpr int TILE = BN * D * 2;
    const size_t smem = (size_t)ST * 2 * TILE + 1024;
    CHECK(cudaFuncSetAttribute(k_cpasync<BN, ST, HINT, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)smem));
    const long long tiles = bytes / TILE;
    const double ms =
        median_ms([&] { k_cpasync<BN, ST, HINT, 2><<<ctas, THREADS, smem>>>(K, V, tiles, out); }, 20);
    printf("%-22s %3d-row tiles %d stages %7.1f MB %4d CTAs: %7.4f ms %6.3f TB/s\n", name, BN, ST,
           2.0 * bytes / 1e6, ctas, ms, 2.0 * bytes / (ms * 1e-3) / 1e12);
}

static int hints_main() {
    for (int round = 0; round < 3; ++round)
        for (long long bytes : {256ll << 20, 1ll << 30}) {
            for (int ctas : {sms, 128}) {
                hint_one<128, 3, 128>("L2::128B", bytes, ctas);
                hint_one<128, 3, 0>("no prefetch", bytes, ctas);
                hint_one<128, 3, 256>("L2::256B", bytes, ctas);
                hint_one<128, 3, 1>("evict_first L2::128B", bytes, ctas);
                hint_one<128, 3, 2>("evict_first", bytes, ctas);
            }
            hint_one<64, 3, 128>("L2::128B", bytes, 2 * sms);
            hint_one<64, 3, 1>("evict_first L2::128B", bytes, 2 * sms);
            hint_one<64, 3, 128>("L2::128B", bytes, 256);
        }
    return 0;
}

int main(int argc, char **argv) {
    CHECK(cudaMalloc(&K, BYTES));
    CHECK(cudaMalloc(&V, BYTES));
    CHECK(cudaMalloc(&out, 4096 * sizeof(unsigned)));
    CHECK(cudaMemset(K, 1, BYTES));
    CHECK(cudaMemset(V, 2, BYTES));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (!fn) {
        fprintf(stderr, "no cuTensorMapEncodeTiled\n");
        return 1;
    }
    encode = (encode_fn)fn;
    if (argc > 1 && std::string(argv[1]) == "tail") return tail_main(false);
    if (argc > 1 && std::string(argv[1]) == "tail-units") return tail_main(true);
    if (argc > 1 && std::string(argv[1]) == "hints") return hints_main();
    if (argc > 1 && std::string(argv[1]) == "order") return order_main();
    printf("K and V: %.2f GiB in all, %d SMs\n", 2.0 * BYTES / (1 << 30), sms);
    run_all<64, 2>(); /* 32 KiB: the decode default's tile, several CTAs an SM */
    run_all<64, 4>();
    run_all<128, 2>();
    run_all<128, 3>(); /* 192 KiB: the 16x128 w8 s3 tile, one CTA an SM */
    CHECK(cudaFree(K));
    CHECK(cudaFree(V));
    CHECK(cudaFree(out));
    return 0;
}
