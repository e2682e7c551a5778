// The CPU families' (SHAPE_EXACT, SHAPE_CPU) matrix-matrix block of float weights, prefill.cl's GEMMs'
// inner part (Q8_0's products: prefill_quantized.cl).
//
// A block is GEMM_ROWS output rows by GEMM_POSITIONS positions: GEMM_HALF rows a0, a0 + step, ... of
// matrix wa and as many of wb from b0 (gemm_gpu.cl says why). A work-item takes a run of blocks' rows (FOR_GROUP_UNITS) and walks all
// positions GEMM_POSITIONS at a time, so its rows stay in the core's cache while every position reads
// them; its floatv accumulators are registers. Every element sums its terms in partial_dot's order (run.c's
// on the exact family), so a prefilled position's values are the decode kernels' bit for bit. Rows and
// positions past the end are clamped for the loads and not stored.
// (The host defines GEMM_ROWS, KernelSet::kGemmRows, Q8_0's products' too; the default only keeps the
// program buildable on its own.)
#ifndef GEMM_ROWS
#define GEMM_ROWS 4
#endif
#if SHAPE_FAMILY != SHAPE_GPU
#define GEMM_KERNEL __kernel  // (any work-group: a work-item per block)
#endif
#if SHAPE_FAMILY != SHAPE_GPU && defined(FLOAT_WEIGHTS)
#define GEMM_POSITIONS 4
#define GEMM_HALF (GEMM_ROWS / 2)
#define GEMM_SLOTS_R GEMM_ROWS
#define GEMM_SLOTS_P GEMM_POSITIONS
// Rows per block of one matrix: the unit a launch's row count is divided into (KernelSet::gemm).
#define GEMM_BLOCK_ROWS GEMM_ROWS
#if SHAPE_FAMILY == SHAPE_EXACT
#define GEMM_MAD(a, b, acc) ((acc) + (a) * (b))  // run.c's sum += w * x
#define GEMM_SUM(acc) (acc)
#else
#define GEMM_MAD(a, b, acc) mad(a, b, acc)  // partial_dot's steps
#define GEMM_SUM(acc) hsum(acc)
#endif

// The blocks of `blocks` this work-item computes, and the first position p0 of each: its block of each of
// its work-group's run of units (ROW_SETUP's row), every position of each.
#define GEMM_FOR_BLOCKS(block, p0, blocks, positions)                                                     \
    FOR_GROUP_UNITS(unit_, blocks)                                                                        \
    for (int block = unit_ * ROWS_PER_GROUP + (int)get_local_id(0), p0 = 0; block < (blocks) && p0 < (positions); \
         p0 += GEMM_POSITIONS)
// Nothing is shared through local memory.
#define GEMM_LOCALS
#define GEMM_LOCAL_ARGS 0, 0, 0
// The block's row (of its half) and position (from p0) of accumulator slot i (< GEMM_HALF) and k.
#define gemm_slot_row(i) (i)
#define gemm_slot_pos(k) (k)

UNIT_FUNCTION void gemm_block(__global const weight_t* wa, int a0, int a_rows, __global const weight_t* wb, int b0,
                              int b_rows, int step, __global const float* in, int n, int p0, int positions,
                              __local float* wl, __local float* xl, __local uint* scratch,
                              float acc[GEMM_SLOTS_R][GEMM_SLOTS_P]) {
    __global const weight_t* wr[GEMM_ROWS];
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; i++)
        wr[i] = i < GEMM_HALF ? WEIGHT_ROW(wa, min(a0 + i * step, a_rows - 1), n)
                              : WEIGHT_ROW(wb, min(b0 + (i - GEMM_HALF) * step, b_rows - 1), n);
    __global const float* xp[GEMM_POSITIONS];
#pragma unroll
    for (int k = 0; k < GEMM_POSITIONS; k++) xp[k] = in + (size_t)min(p0 + k, positions - 1) * n;
#if SHAPE_FAMILY == SHAPE_EXACT && GEMM_ROWS * GEMM_POSITIONS == 16
    // The exact family: the 16 sums are the lanes of one vector (lane 4 i + k: row i, position k), sixteen
    // elements at a time multiplied and added column by column (add_columns), as partial_dot16 does.
    float16 lanes = (float16)(0.0f);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        floatw a[GEMM_ROWS], b[GEMM_POSITIONS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; i++) a[i] = WEIGHTW(wr[i], j);
#pragma unroll
        for (int k = 0; k < GEMM_POSITIONS; k++) b[k] = vloadw(xp[k] + j);
        float16 m[16];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
            for (int k = 0; k < GEMM_POSITIONS; k++) m[i * GEMM_POSITIONS + k] = a[i] * b[k];
        lanes = add_columns(lanes, m);
    }
    float sums[16];
    vstore16(lanes, 0, sums);
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; i++) {
#pragma unroll
        for (int k = 0; k < GEMM_POSITIONS; k++) {
            float s = sums[i * GEMM_POSITIONS + k];
            for (int t = j; t < n; t++) s = GEMM_MAD(WEIGHT(wr[i], t), xp[k][t], s);
            acc[i][k] = s;
        }
    }
#else
    floatv sum[GEMM_ROWS][GEMM_POSITIONS];
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
        for (int k = 0; k < GEMM_POSITIONS; k++) sum[i][k] = (floatv)(0.0f);
    int j = 0;
    for (; j + VECTOR_WIDTH <= n; j += VECTOR_WIDTH) {
        floatv a[GEMM_ROWS], b[GEMM_POSITIONS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; i++) a[i] = WEIGHTV(wr[i], j);
#pragma unroll
        for (int k = 0; k < GEMM_POSITIONS; k++) b[k] = vloadv(xp[k] + j);
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
            for (int k = 0; k < GEMM_POSITIONS; k++) sum[i][k] = GEMM_MAD(a[i], b[k], sum[i][k]);
    }
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; i++) {
#pragma unroll
        for (int k = 0; k < GEMM_POSITIONS; k++) {
            float s = GEMM_SUM(sum[i][k]);
            for (int t = j; t < n; t++) s = GEMM_MAD(WEIGHT(wr[i], t), xp[k][t], s);
            acc[i][k] = s;
        }
    }
#endif
}
#endif
