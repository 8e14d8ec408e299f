/*
 * The order in which family ws's persistent grid takes causal work tiles.
 * Plain C: an NVRTC named header of ws/mainloop.cuh (so the kernel
 * revision covers it) and included by the host tests.
 *
 * A causal tile's cost is its key tiles, which fall linearly from the last
 * m-block (every key) to the first (one tile). A persistent CTA c of C
 * took tiles c, c + C, c + 2C, ... of the sequence "m-block fastest,
 * longest first": CTA c's m-blocks were then c, c + C, ... modulo the
 * m-block count, which covers every m-block only when the CTA takes
 * enough tiles. On the H200 at seqlen 16384 (128 m-blocks, 16 heads, 132
 * CTAs: 15.5 tiles a CTA stepping 4 m-blocks a tile, half the cycle) the
 * heaviest CTA had 1.57x the mean work and the kernel ran 1.47x slower
 * than one CTA a tile (docs/perf.md, ws).
 *
 * Here the causal sequence is longest first across the whole grid: bands
 * of TT_WS_BAND m-blocks, the longest band of every (head, batch) first,
 * m-blocks fastest within a band, so the CTAs of one wave still share K/V
 * in L2 (a band's CTAs read the same keys). And the waves snake: CTA c
 * takes the c-th tile of even waves and the (C-1-c)-th of odd ones, so
 * the CTA with a wave's longest tile gets the next wave's shortest.
 */
#ifndef TT_WS_SCHED_H
#define TT_WS_SCHED_H

#ifdef __CUDACC_RTC__
#define TT_WS_FN __device__ __forceinline__
#else
#define TT_WS_FN static inline
#endif

/* m-blocks a band: 8 keeps a wave's tiles within 8 m-blocks of one
 * another in cost order (the snake evens that out), and puts 8 CTAs on
 * each (head, batch)'s K/V: at d128, 128-row tiles, 8 readers a key tile
 * need 0.6 TB/s of DRAM at 600 TFLOP/s. */
#define TT_WS_BAND 8

/* The persistent kernel's tile index counts to total + 2 x grid, so the
 * launch bounds the tiles well below 2^31. */
#define TT_WS_MAX_TILES (1 << 30)

/* The w-th tile index of CTA c of a grid of `ctas` (waves snake). */
TT_WS_FN int tt_ws_wave_tile(int ctas, int c, int w) { return w * ctas + ((w & 1) ? ctas - 1 - c : c); }

/* Causal tile t of n_mb m-blocks x hb (head, batch) pairs: returns the
 * m-block's rank from the longest (0: the last m-block, every key) and
 * sets *pair. A bijection of [0, n_mb * hb) onto rank x pair. */
TT_WS_FN int tt_ws_causal_tile(int t, int n_mb, int hb, int *pair) {
    /* every band is TT_WS_BAND m-blocks wide but the last, of the n_mb %
     * TT_WS_BAND shortest (its tiles number fewer than a band's); with no
     * whole band, TT_WS_BAND x hb could pass the launch's tile bound */
    const int full = n_mb / TT_WS_BAND;
    const int band = full ? t / (TT_WS_BAND * hb) : 0;
    const int width = band < full ? TT_WS_BAND : n_mb - full * TT_WS_BAND;
    const int r = t - band * TT_WS_BAND * hb;
    *pair = r / width;
    return band * TT_WS_BAND + r % width;
}

#endif
