// The GPU family's (SHAPE_GPU) matrix-matrix block of float weights, prefill.cl's GEMMs' inner part: a
// tiled product with double-buffered local memory, on the SIMT cores (register-blocked fma) or, with
// GEMM_MMA, on tensor cores (tensor_cores.cl).
//
// A work-group (GEMM_GROUP_R x GEMM_GROUP_P work-items) computes a block of GEMM_TR rows by GEMM_TP
// positions (the host builds a program per tile: KernelSet::gemm). Half its rows are rows a0, a0 + step,
// ... of matrix wa, the others the same rows of wb from b0 (the same matrix's next rows, or a second
// matrix whose rows pair with the first's: w1 and w3), and every work-item holds the sums of a row of
// wa's half with its partner of wb's (a RoPE pair, a gate with its up row). The tile's weights and
// inputs pass through local memory GEMM_TK elements of k at a time, transposed (k-major); the next step's
// are loaded from global memory into registers while this step's are multiplied, and stored to the other
// of two buffers, so one barrier per step suffices. Each element sums its terms in k's order (the tail of
// a row as zeros).
#if SHAPE_FAMILY == SHAPE_GPU
#ifndef GEMM_TR
#define GEMM_TR 64
#endif
#ifndef GEMM_TP
#define GEMM_TP 64
#endif
#if GEMM_TR != 64 && GEMM_TR != 128 || GEMM_TP != 64 && GEMM_TP != 128
#error GEMM_TR and GEMM_TP must be 64 or 128
#endif
// The work-group: GEMM_GROUP_R work-items along the tile's rows (local dimension 0) by GEMM_GROUP_P along
// its positions, 16 x 16, but 16 x 8 for the SIMT cores' 64 x 64 tile: each work-item's 4 rows by 8
// positions take 12 floats of local memory a step of k for 32 multiply-adds, where 4 x 4 took 8 for 16
// (a lane's float costs local memory a cycle whatever the vector). The kernels declare it (GEMM_KERNEL)
// and the host reads it from them (KernelSet::gemm).
#if defined(FLOAT_WEIGHTS) && !defined(GEMM_MMA) && GEMM_TR == 64 && GEMM_TP == 64
#define GEMM_SIMT_SMALL 1
#define GEMM_GROUP_P 8
#else
#define GEMM_SIMT_SMALL 0
#define GEMM_GROUP_P 16
#endif
#define GEMM_GROUP_R 16
#define GEMM_THREADS (GEMM_GROUP_R * GEMM_GROUP_P)
#define GEMM_KERNEL __kernel __attribute__((reqd_work_group_size(GEMM_GROUP_R, GEMM_GROUP_P, 1)))
inline int gemm_flat(void) { return get_local_id(1) * GEMM_GROUP_R + get_local_id(0); }
// (The tile's geometry above is Q8_0's too: prefill_quantized.cl. The block below reads float weights.)
#ifdef FLOAT_WEIGHTS
#define GEMM_HALF (GEMM_TR / 2)
#define GEMM_BLOCK_ROWS GEMM_TR
#define GEMM_W_LOADS (GEMM_TR * GEMM_TK / GEMM_THREADS)
#define GEMM_X_LOADS (GEMM_TP * GEMM_TK / GEMM_THREADS)

#ifdef GEMM_MMA
// Tensor cores: the tile's 8 warps in 2 (rows) x 4 (positions), each GEMM_WARP_ROWS x GEMM_WARP_POSITIONS
// of it in m16n8k8 blocks, GEMM_MB x GEMM_NB of them. Local rows come in blocks of 16: 8 rows of wa's
// half, then their 8 partners of wb's, so that a work-item's D fragment (rows g and g + 8) holds a row
// and its partner. A local row of the tile is padded to 8 floats past a multiple of 32, so that the
// fragments' reads (t's rows of k, g's columns) fall in distinct banks.
#define GEMM_WARP_ROWS (GEMM_TR / 2)
#define GEMM_WARP_POSITIONS (GEMM_TP / 4)
#define GEMM_MB (GEMM_WARP_ROWS / 16)
#define GEMM_NB (GEMM_WARP_POSITIONS / 8)
#define GEMM_SLOTS_R (2 * GEMM_MB)  // D's rows g of each block, then rows g + 8
#define GEMM_SLOTS_P (2 * GEMM_NB)  // D's positions 2t and 2t + 1 of each block
#define GEMM_PAD 8
#define GEMM_LOCAL_IN_B(t) ((t) % 16 >= 8)
#define GEMM_LOCAL_ROW(t) ((t) / 16 * 8 + (t) % 8)
// The TF32 products a multiply-add takes (tensor_cores.cl): 3xTF32, 2 for f16 weights (TF32 values, no
// remainder); with PROMPT_FAST (--prompt-precision fast) one, a_hi b_hi, as single-pass TF32.
#ifdef PROMPT_FAST
#define GEMM_TF32_PRODUCTS 1
#elif defined(WEIGHT_F16)
#define GEMM_TF32_PRODUCTS 2
#else
#define GEMM_TF32_PRODUCTS 3
#endif
inline int gemm_lane(void) { return gemm_flat() % 32; }
inline int gemm_warp(void) { return gemm_flat() / 32; }
// The row (of its half, 0..GEMM_HALF - 1) and position (from p0) of accumulator slot i (< GEMM_SLOTS_R / 2) and k.
#define gemm_slot_row(i) (gemm_warp() % 2 * (GEMM_WARP_ROWS / 2) + (i) * 8 + gemm_lane() / 4)
#define gemm_slot_pos(k) (gemm_warp() / 2 * GEMM_WARP_POSITIONS + (k) / 2 * 8 + 2 * (gemm_lane() % 4) + (k) % 2)
#else
// SIMT cores: each work-item GEMM_HR consecutive rows of each half by GEMM_HP consecutive positions of
// each half of the tile's positions, read from local memory as vectors. Local rows: wa's half, then
// wb's. A local row of the tile is padded by 4 floats, which keeps the vector reads aligned and spreads
// the k-major stores over the banks: a warp's 32 stores meet 2 to a bank at steps of 16, 4 at steps of 32.
#define GEMM_HR (GEMM_TR / (2 * GEMM_GROUP_R))
#define GEMM_HP (GEMM_TP / (2 * GEMM_GROUP_P))
#define GEMM_SLOTS_R (2 * GEMM_HR)
#define GEMM_SLOTS_P (2 * GEMM_HP)
#define GEMM_PAD 4
#define GEMM_LOCAL_IN_B(t) ((t) >= GEMM_HALF)
#define GEMM_LOCAL_ROW(t) ((t) % GEMM_HALF)
// Element i (a constant once unrolled) of a float4 or float2.
#define GEMM_ELEMENT4(v, i) ((i) == 0 ? (v).s0 : (i) == 1 ? (v).s1 : (i) == 2 ? (v).s2 : (v).s3)
#define GEMM_ELEMENT2(v, i) ((i) == 0 ? (v).s0 : (v).s1)
#if GEMM_HR == 4
typedef float4 gemm_rows_t;
#define GEMM_ROWS_ELEMENT GEMM_ELEMENT4
#else
typedef float2 gemm_rows_t;
#define GEMM_ROWS_ELEMENT GEMM_ELEMENT2
#endif
#if GEMM_HP == 4
typedef float4 gemm_positions_t;
#define GEMM_POSITIONS_ELEMENT GEMM_ELEMENT4
#else
typedef float2 gemm_positions_t;
#define GEMM_POSITIONS_ELEMENT GEMM_ELEMENT2
#endif
// The work-item's column (rows) and row (positions) of the work-group's grid. A warp of 32 covers 8
// columns by 4 rows of it, so that its vector reads of local memory touch few distinct addresses.
#define GEMM_WARPS_R (GEMM_GROUP_R / 8)
inline int gemm_tx(void) { return gemm_flat() % 8 + 8 * ((gemm_flat() / 32) % GEMM_WARPS_R); }
inline int gemm_ty(void) { return (gemm_flat() % 32) / 8 + 4 * (gemm_flat() / (32 * GEMM_WARPS_R)); }
#define gemm_slot_row(i) (gemm_tx() * GEMM_HR + (i))
#define gemm_slot_pos(k) ((k) < GEMM_HP ? gemm_ty() * GEMM_HP + (k) : GEMM_TP / 2 + gemm_ty() * GEMM_HP + (k) - GEMM_HP)
#endif
#define GEMM_WL_STRIDE (GEMM_TR + GEMM_PAD)
#define GEMM_XL_STRIDE (GEMM_TP + GEMM_PAD)
// Elements of k per step (a tunable: LLAMACL_BUILD_OPTIONS=-DGEMM_TK=16): 32 for the SIMT cores' 64 x 64
// tile, half as many barriers a product, where local memory holds its two buffers of 32 (34 KiB: not on
// GPUs of 32 KiB; the host passes LOCAL_MEM_BYTES) and 1 KiB for the compiler's own; else 16.
#ifndef GEMM_TK
#if GEMM_SIMT_SMALL && 2 * 32 * (GEMM_WL_STRIDE + GEMM_XL_STRIDE) * 4 + 1024 <= LOCAL_MEM_BYTES
#define GEMM_TK 32
#else
#define GEMM_TK 16
#endif
#endif
#if GEMM_TK != 16 && GEMM_TK != 32
#error GEMM_TK must be 16 or 32
#endif

// The work-group's one block and its first position.
#define GEMM_FOR_BLOCKS(block, p0, blocks, positions) \
    for (int block = get_group_id(0), p0 = get_group_id(1) * GEMM_TP, once_ = 1; once_; once_ = 0)
// Two buffers of each tile (float4s, for the alignment of vector reads), and the tensor cores'
// emulation's matrices (per warp: A's hi and lo of every mb, B's of every nb).
#if defined(GEMM_MMA) && defined(MMA_EMULATE)
#define GEMM_MMA_SCRATCH_WARP (GEMM_MB * 2 * 128 + GEMM_NB * 2 * 64)
#define GEMM_MMA_SCRATCH (GEMM_THREADS / 32 * GEMM_MMA_SCRATCH_WARP)
#else
#define GEMM_MMA_SCRATCH 1
#endif
#define GEMM_LOCALS                                        \
    __local float4 wl4_[2 * GEMM_TK * GEMM_WL_STRIDE / 4]; \
    __local float4 xl4_[2 * GEMM_TK * GEMM_XL_STRIDE / 4]; \
    __local uint mma_scratch_[GEMM_MMA_SCRATCH]
#define GEMM_LOCAL_ARGS (__local float*)wl4_, (__local float*)xl4_, mma_scratch_

// This work-item's loads of a step from k = j0: element kk of k of tile rows (and positions) t0 + s *
// GEMM_LOAD_STRIDE, consecutive work-items along a row (coalesced), zeros past the row's end; `woff` and
// `xoff` are the rows' element offsets, `in_b` whether the tile row is of wb's half.
#define GEMM_LOAD_STRIDE (GEMM_THREADS / GEMM_TK)
UNIT_FUNCTION void gemm_load(__global const weight_t* wa, __global const weight_t* wb, __global const float* in,
                             const uint* woff, const int* in_b, const uint* xoff, int n, int j0, int kk, float* wreg,
                             float* xreg) {
    const int j = j0 + kk;
    const int inside = j < n;
#pragma unroll
    for (int s = 0; s < GEMM_W_LOADS; s++) wreg[s] = inside ? WEIGHT(in_b[s] ? wb : wa, woff[s] + j) : 0.0f;
#pragma unroll
    for (int s = 0; s < GEMM_X_LOADS; s++) xreg[s] = inside ? in[xoff[s] + j] : 0.0f;
}
UNIT_FUNCTION void gemm_store(__local float* wt, __local float* xt, int kk, int t0, const float* wreg, const float* xreg) {
#pragma unroll
    for (int s = 0; s < GEMM_W_LOADS; s++) wt[kk * GEMM_WL_STRIDE + t0 + s * GEMM_LOAD_STRIDE] = wreg[s];
#pragma unroll
    for (int s = 0; s < GEMM_X_LOADS; s++) xt[kk * GEMM_XL_STRIDE + t0 + s * GEMM_LOAD_STRIDE] = xreg[s];
}

// One step's products: GEMM_TK elements of k of the tile in local memory (wt, xt) into acc.
#ifdef GEMM_MMA
// The D fragment of m16n8k8 block (mb, nb) is acc[GEMM_D_ROW(mb, i)][GEMM_D_POS(nb, i)], i = 0..3.
#define GEMM_D_ROW(mb, i) ((i) < 2 ? (mb) : GEMM_MB + (mb))
#define GEMM_D_POS(nb, i) (2 * (nb) + ((i) & 1))
UNIT_FUNCTION void gemm_step(__local const float* wt, __local const float* xt, float acc[GEMM_SLOTS_R][GEMM_SLOTS_P],
                             __local uint* scratch) {
    const int g = gemm_lane() / 4, t = gemm_lane() % 4;
    const int row0 = gemm_warp() % 2 * GEMM_WARP_ROWS + g, pos0 = gemm_warp() / 2 * GEMM_WARP_POSITIONS + g;
#pragma unroll
    for (int k0 = 0; k0 < GEMM_TK; k0 += 8) {
        __local const float* w_lo = wt + (k0 + t) * GEMM_WL_STRIDE;  // k = k0 + t, and k0 + t + 4 below
        __local const float* w_hi = w_lo + 4 * GEMM_WL_STRIDE;
        __local const float* x_lo = xt + (k0 + t) * GEMM_XL_STRIDE;
        __local const float* x_hi = x_lo + 4 * GEMM_XL_STRIDE;
        uint a_hi[GEMM_MB][4], a_lo[GEMM_MB][4], b_hi[GEMM_NB][2], b_lo[GEMM_NB][2];
#pragma unroll
        for (int mb = 0; mb < GEMM_MB; mb++) {
            const int r = row0 + mb * 16;
            tf32_split(w_lo[r], &a_hi[mb][0], &a_lo[mb][0]);
            tf32_split(w_lo[r + 8], &a_hi[mb][1], &a_lo[mb][1]);
            tf32_split(w_hi[r], &a_hi[mb][2], &a_lo[mb][2]);
            tf32_split(w_hi[r + 8], &a_hi[mb][3], &a_lo[mb][3]);
        }
#pragma unroll
        for (int nb = 0; nb < GEMM_NB; nb++) {
            tf32_split(x_lo[pos0 + nb * 8], &b_hi[nb][0], &b_lo[nb][0]);
            tf32_split(x_hi[pos0 + nb * 8], &b_hi[nb][1], &b_lo[nb][1]);
        }
#ifdef MMA_EMULATE
        // The warp's fragments as matrices: A's hi and lo of each mb, then B's of each nb.
        __local uint* a_at = scratch + gemm_warp() * GEMM_MMA_SCRATCH_WARP;
        __local uint* b_at = a_at + GEMM_MB * 2 * 128;
        for (int mb = 0; mb < GEMM_MB; mb++) {
            mma_publish_a(a_at + (2 * mb) * 128, a_hi[mb]);
            if (GEMM_TF32_PRODUCTS == 3) mma_publish_a(a_at + (2 * mb + 1) * 128, a_lo[mb]);
        }
        for (int nb = 0; nb < GEMM_NB; nb++) {
            mma_publish_b(b_at + (2 * nb) * 64, b_hi[nb]);
            if (GEMM_TF32_PRODUCTS > 1) mma_publish_b(b_at + (2 * nb + 1) * 64, b_lo[nb]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int mb = 0; mb < GEMM_MB; mb++) {
            for (int nb = 0; nb < GEMM_NB; nb++) {
                __local const uint* ah = a_at + (2 * mb) * 128;
                __local const uint* bh = b_at + (2 * nb) * 64;
                for (int i = 0; i < 4; i++) {
                    float d = acc[GEMM_D_ROW(mb, i)][GEMM_D_POS(nb, i)];
                    if (GEMM_TF32_PRODUCTS == 3) d = mma_element(ah + 128, bh, i, d);  // a_lo b_hi
                    if (GEMM_TF32_PRODUCTS > 1) d = mma_element(ah, bh + 64, i, d);    // a_hi b_lo
                    d = mma_element(ah, bh, i, d);                                     // a_hi b_hi
                    acc[GEMM_D_ROW(mb, i)][GEMM_D_POS(nb, i)] = d;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next fragments overwrite these
#else
#pragma unroll
        for (int mb = 0; mb < GEMM_MB; mb++) {
#pragma unroll
            for (int nb = 0; nb < GEMM_NB; nb++) {
#define GEMM_D(i) acc[GEMM_D_ROW(mb, i)][GEMM_D_POS(nb, i)]
                // The small terms first.
                if (GEMM_TF32_PRODUCTS == 3)
                    MMA_TF32(GEMM_D(0), GEMM_D(1), GEMM_D(2), GEMM_D(3), a_lo[mb], b_hi[nb]);
                if (GEMM_TF32_PRODUCTS > 1) MMA_TF32(GEMM_D(0), GEMM_D(1), GEMM_D(2), GEMM_D(3), a_hi[mb], b_lo[nb]);
                MMA_TF32(GEMM_D(0), GEMM_D(1), GEMM_D(2), GEMM_D(3), a_hi[mb], b_hi[nb]);
#undef GEMM_D
            }
        }
#endif
    }
}
#else
UNIT_FUNCTION void gemm_step(__local const float* wt, __local const float* xt, float acc[GEMM_SLOTS_R][GEMM_SLOTS_P],
                             __local uint* scratch) {
    const int tx = gemm_tx(), ty = gemm_ty();
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
}
#endif

UNIT_FUNCTION void gemm_block(__global const weight_t* wa, int a0, int a_rows, __global const weight_t* wb, int b0,
                              int b_rows, int step, __global const float* in, int n, int p0, int positions,
                              __local float* wl, __local float* xl, __local uint* scratch,
                              float acc[GEMM_SLOTS_R][GEMM_SLOTS_P]) {
    const int flat = gemm_flat();
    const int t0 = flat / GEMM_TK, kk = flat - t0 * GEMM_TK;  // (a product: see attention.cl)
    // Rows past a matrix's end, and positions past the batch's, load its last one. (Offsets of 32 bits:
    // the host runs prefill only where every matrix has fewer than 2^32 elements.)
    uint woff[GEMM_W_LOADS], xoff[GEMM_X_LOADS];
    int in_b[GEMM_W_LOADS];
#pragma unroll
    for (int s = 0; s < GEMM_W_LOADS; s++) {
        const int t = t0 + s * GEMM_LOAD_STRIDE, row = GEMM_LOCAL_ROW(t) * step;
        in_b[s] = GEMM_LOCAL_IN_B(t);
        woff[s] = (uint)(in_b[s] ? min(b0 + row, b_rows - 1) : min(a0 + row, a_rows - 1)) * (uint)n;
    }
#pragma unroll
    for (int s = 0; s < GEMM_X_LOADS; s++) xoff[s] = (uint)min(p0 + t0 + s * GEMM_LOAD_STRIDE, positions - 1) * (uint)n;
    float wreg[GEMM_W_LOADS], xreg[GEMM_X_LOADS];

#pragma unroll
    for (int i = 0; i < GEMM_SLOTS_R; i++)
#pragma unroll
        for (int k = 0; k < GEMM_SLOTS_P; k++) acc[i][k] = 0.0f;
    const int steps = (n + GEMM_TK - 1) / GEMM_TK;
    gemm_load(wa, wb, in, woff, in_b, xoff, n, 0, kk, wreg, xreg);
    gemm_store(wl, xl, kk, t0, wreg, xreg);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k_step = 0; k_step < steps; k_step++) {
        const int buf = k_step % 2;
        // The next step's loads are in flight while this one multiplies.
        if (k_step + 1 < steps) gemm_load(wa, wb, in, woff, in_b, xoff, n, (k_step + 1) * GEMM_TK, kk, wreg, xreg);
        gemm_step(wl + buf * GEMM_TK * GEMM_WL_STRIDE, xl + buf * GEMM_TK * GEMM_XL_STRIDE, acc, scratch);
        // Every work-item is done with the other buffer: it read it in the step before the last barrier.
        if (k_step + 1 < steps)
            gemm_store(wl + (1 - buf) * GEMM_TK * GEMM_WL_STRIDE, xl + (1 - buf) * GEMM_TK * GEMM_XL_STRIDE, kk, t0,
                       wreg, xreg);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif  // FLOAT_WEIGHTS
#endif
