// The GPU family's (SHAPE_GPU) matrix-matrix block, prefill.cl's GEMMs' inner part: a register-blocked
// tiled product with double-buffered local memory.
//
// A work-group of 16 x 16 work-items computes a block of GEMM_TR rows by GEMM_TP positions (the host
// builds a program per tile: KernelSet::gemm). Its first GEMM_HALF rows are rows a0.. of matrix wa, the
// others rows b0.. of wb (the same matrix further on, or a second one whose rows pair with the first's:
// w1 and w3). Each work-item accumulates GEMM_SLOTS_R x GEMM_SLOTS_P elements in registers: GEMM_HR
// consecutive rows of each half (so a RoPE pair, and a gate with its up row, meet in one work-item) by
// GEMM_HP consecutive positions of each half of the tile's positions. The tile's weights and inputs pass
// through local memory GEMM_TK elements of k at a time, transposed (k-major) so that a work-item reads its
// rows and positions as vectors; the next step's are loaded from global memory into registers while this
// step's are multiplied, and stored to the other of two buffers, so one barrier per step suffices. Each
// element sums its terms in k's order, one fused multiply-add each (the tail of a row included, as zeros).
#if SHAPE_FAMILY == SHAPE_GPU
#ifndef GEMM_TR
#define GEMM_TR 64
#endif
#ifndef GEMM_TP
#define GEMM_TP 64
#endif
#define GEMM_GROUP 16  // work-items along each side of the work-group
#define GEMM_THREADS (GEMM_GROUP * GEMM_GROUP)
#define GEMM_TK 16
#define GEMM_HALF (GEMM_TR / 2)
#define GEMM_HR (GEMM_TR / (2 * GEMM_GROUP))
#define GEMM_HP (GEMM_TP / (2 * GEMM_GROUP))
#define GEMM_SLOTS_R (2 * GEMM_HR)
#define GEMM_SLOTS_P (2 * GEMM_HP)
#define GEMM_BLOCK_ROWS GEMM_TR
// A local row of the tile is padded so that the k-major stores spread over the banks, by a multiple of
// four floats so that every work-item's vector reads stay aligned.
#define GEMM_WL_STRIDE (GEMM_TR + 4)
#define GEMM_XL_STRIDE (GEMM_TP + 4)
#define GEMM_W_LOADS (GEMM_TR * GEMM_TK / GEMM_THREADS)
#define GEMM_X_LOADS (GEMM_TP * GEMM_TK / GEMM_THREADS)
// Element i (a constant once unrolled) of a float4 or float2.
#define GEMM_ELEMENT4(v, i) ((i) == 0 ? (v).s0 : (i) == 1 ? (v).s1 : (i) == 2 ? (v).s2 : (v).s3)
#define GEMM_ELEMENT2(v, i) ((i) == 0 ? (v).s0 : (v).s1)
#if GEMM_HR == 4
typedef float4 gemm_rows_t;
#define GEMM_ROWS_ELEMENT GEMM_ELEMENT4
#elif GEMM_HR == 2
typedef float2 gemm_rows_t;
#define GEMM_ROWS_ELEMENT GEMM_ELEMENT2
#else
#error GEMM_TR must be 64 or 128
#endif
#if GEMM_HP == 4
typedef float4 gemm_positions_t;
#define GEMM_POSITIONS_ELEMENT GEMM_ELEMENT4
#elif GEMM_HP == 2
typedef float2 gemm_positions_t;
#define GEMM_POSITIONS_ELEMENT GEMM_ELEMENT2
#else
#error GEMM_TP must be 64 or 128
#endif

// The work-group's one block and its first position.
#define GEMM_FOR_BLOCKS(block, p0, blocks, positions) \
    for (int block = get_group_id(0), p0 = get_group_id(1) * GEMM_TP, once_ = 1; once_; once_ = 0)
// Two buffers of each tile (float4s, for the alignment of the vector reads).
#define GEMM_LOCALS                                                  \
    __local float4 wl4_[2 * GEMM_TK * GEMM_WL_STRIDE / 4];           \
    __local float4 xl4_[2 * GEMM_TK * GEMM_XL_STRIDE / 4]
#define GEMM_LOCAL_ARGS (__local float*)wl4_, (__local float*)xl4_

// The work-item's column (rows) and row (positions) of the 16 x 16 grid. A warp of 32 covers 8 columns by
// 4 rows of it, so that its vector reads of local memory touch few distinct addresses.
inline int gemm_tx(void) {
    const int flat = get_local_id(1) * GEMM_GROUP + get_local_id(0);
    return flat % 8 + 8 * ((flat / 32) % 2);
}
inline int gemm_ty(void) {
    const int flat = get_local_id(1) * GEMM_GROUP + get_local_id(0);
    return (flat % 32) / 8 + 4 * (flat / 64);
}
// The block's row (of its half) and position (from p0) of accumulator slot i (< GEMM_HR) and k.
#define gemm_slot_row(i) (gemm_tx() * GEMM_HR + (i))
#define gemm_slot_pos(k) ((k) < GEMM_HP ? gemm_ty() * GEMM_HP + (k) : GEMM_TP / 2 + gemm_ty() * GEMM_HP + (k) - GEMM_HP)

// This work-item's loads of a step from k = j0: element kk of k of tile rows (and positions) t0 + s *
// GEMM_LOAD_STRIDE, consecutive work-items along a row (coalesced), zeros past the row's end. The first
// half of the slots are wa's rows, the others wb's. `woff` and `xoff` are the rows' element offsets.
#define GEMM_LOAD_STRIDE (GEMM_THREADS / GEMM_TK)
UNIT_FUNCTION void gemm_load(__global const weight_t* wa, __global const weight_t* wb, __global const float* in,
                             const uint* woff, const uint* xoff, int n, int j0, int kk, float* wreg, float* xreg) {
    const int j = j0 + kk;
    const int inside = j < n;
#pragma unroll
    for (int s = 0; s < GEMM_W_LOADS; s++)
        wreg[s] = inside ? WEIGHT(s < GEMM_W_LOADS / 2 ? wa : wb, woff[s] + j) : 0.0f;
#pragma unroll
    for (int s = 0; s < GEMM_X_LOADS; s++) xreg[s] = inside ? in[xoff[s] + j] : 0.0f;
}
UNIT_FUNCTION void gemm_store(__local float* wt, __local float* xt, int kk, int t0, const float* wreg, const float* xreg) {
#pragma unroll
    for (int s = 0; s < GEMM_W_LOADS; s++) wt[kk * GEMM_WL_STRIDE + t0 + s * GEMM_LOAD_STRIDE] = wreg[s];
#pragma unroll
    for (int s = 0; s < GEMM_X_LOADS; s++) xt[kk * GEMM_XL_STRIDE + t0 + s * GEMM_LOAD_STRIDE] = xreg[s];
}

UNIT_FUNCTION void gemm_block(__global const weight_t* wa, int a0, int a_rows, __global const weight_t* wb, int b0,
                              int b_rows, __global const float* in, int n, int p0, int positions, __local float* wl,
                              __local float* xl, float acc[GEMM_SLOTS_R][GEMM_SLOTS_P]) {
    const int flat = get_local_id(1) * GEMM_GROUP + get_local_id(0);
    const int tx = gemm_tx(), ty = gemm_ty();
    const int kk = flat % GEMM_TK, t0 = flat / GEMM_TK;
    // Rows past a matrix's end, and positions past the batch's, load its last one. (Offsets of 32 bits:
    // the host runs prefill only where every matrix has fewer than 2^32 elements.)
    uint woff[GEMM_W_LOADS], xoff[GEMM_X_LOADS];
#pragma unroll
    for (int s = 0; s < GEMM_W_LOADS; s++) {
        const int t = t0 + s * GEMM_LOAD_STRIDE;  // t < GEMM_HALF exactly for the first half of the slots
        woff[s] = (uint)(t < GEMM_HALF ? min(a0 + t, a_rows - 1) : min(b0 + t - GEMM_HALF, b_rows - 1)) * (uint)n;
    }
#pragma unroll
    for (int s = 0; s < GEMM_X_LOADS; s++) xoff[s] = (uint)min(p0 + t0 + s * GEMM_LOAD_STRIDE, positions - 1) * (uint)n;
    float wreg[GEMM_W_LOADS], xreg[GEMM_X_LOADS];

#pragma unroll
    for (int i = 0; i < GEMM_SLOTS_R; i++)
#pragma unroll
        for (int k = 0; k < GEMM_SLOTS_P; k++) acc[i][k] = 0.0f;
    const int steps = (n + GEMM_TK - 1) / GEMM_TK;
    gemm_load(wa, wb, in, woff, xoff, n, 0, kk, wreg, xreg);
    gemm_store(wl, xl, kk, t0, wreg, xreg);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = 0; step < steps; step++) {
        const int buf = step % 2;
        // The next step's loads are in flight while this one multiplies.
        if (step + 1 < steps) gemm_load(wa, wb, in, woff, xoff, n, (step + 1) * GEMM_TK, kk, wreg, xreg);
        __local const float* wt = wl + buf * GEMM_TK * GEMM_WL_STRIDE;
        __local const float* xt = xl + buf * GEMM_TK * GEMM_XL_STRIDE;
#pragma unroll
        for (int k = 0; k < GEMM_TK; k++) {
            const gemm_rows_t a0v = *(__local const gemm_rows_t*)(wt + k * GEMM_WL_STRIDE + tx * GEMM_HR);
            const gemm_rows_t a1v = *(__local const gemm_rows_t*)(wt + k * GEMM_WL_STRIDE + GEMM_HALF + tx * GEMM_HR);
            const gemm_positions_t b0v = *(__local const gemm_positions_t*)(xt + k * GEMM_XL_STRIDE + ty * GEMM_HP);
            const gemm_positions_t b1v =
                *(__local const gemm_positions_t*)(xt + k * GEMM_XL_STRIDE + GEMM_TP / 2 + ty * GEMM_HP);
            float a[GEMM_SLOTS_R], b[GEMM_SLOTS_P];
#pragma unroll
            for (int i = 0; i < GEMM_HR; i++) {
                a[i] = GEMM_ROWS_ELEMENT(a0v, i);
                a[GEMM_HR + i] = GEMM_ROWS_ELEMENT(a1v, i);
            }
#pragma unroll
            for (int i = 0; i < GEMM_HP; i++) {
                b[i] = GEMM_POSITIONS_ELEMENT(b0v, i);
                b[GEMM_HP + i] = GEMM_POSITIONS_ELEMENT(b1v, i);
            }
#pragma unroll
            for (int i = 0; i < GEMM_SLOTS_R; i++)
#pragma unroll
                for (int p = 0; p < GEMM_SLOTS_P; p++) acc[i][p] = fma(a[i], b[p], acc[i][p]);
        }
        // Every work-item is done with the other buffer: it read it in the step before the last barrier.
        if (step + 1 < steps) gemm_store(wl + (1 - buf) * GEMM_TK * GEMM_WL_STRIDE, xl + (1 - buf) * GEMM_TK * GEMM_XL_STRIDE,
                                         kk, t0, wreg, xreg);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif
