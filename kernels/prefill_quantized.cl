// Prefill's matrix-matrix products for quantized weights (prefill.cl's for the float formats): each
// position's input is quantized first (quantize_rows) into a row laid out as a Q8_0 weight row
// (weights.cl's Q8_ROW, which Q4_0's weights are read against too), and every output element
// is the reference's matmul of the two, its groups' terms (Q8_TERM: the format's rule) added in order, so
// a prefilled position's values are the decode kernels' on the CPU families and the reference's matmul
// on every family. The products are not fused: RoPE and SwiGLU are kernels of their own (rope_rows, swiglu).
#ifdef QUANTIZED_WEIGHTS

// Each position's row of x (positions x n floats) quantized as stage_input quantizes a decode step's
// input, into row p of `out` (rows of Q8_ROW_BYTES(n) bytes: the values as weights.cl lays them out,
// then the scales): one work-group per position, through `staged` (KernelSet::staged_space(n)).
__kernel void quantize_rows(__global const float* x, __global char* out, int n, __local float* staged) {
    const size_t p = get_group_id(0);
    stage_input(staged, x + p * n, 0, 0.0f, n);
    __global char* row = Q8_ROW(out, p, n);
    __local const char* values = STAGED_VALUES(staged, n);
    for (int j = get_local_id(0); j < n; j += LOCAL) row[j] = values[j];
    for (int g = get_local_id(0); g < n / GROUP_SIZE; g += LOCAL) ((__global float*)(row + n))[g] = staged[g];
}

// out[p][r] = w[r] . in[p] for `rows` rows of n weights and `positions` quantized positions (quantize_rows'
// rows), out's rows starting at out_offset; with `accumulate`, added to what out holds (the residual: the
// sum formed first, as runq.c does).
#if SHAPE_FAMILY != SHAPE_GPU
// CPU families: a work-item takes GEMM_ROWS consecutive rows and walks all positions Q8_GEMM_POSITIONS at a
// time, its rows staying in the core's cache while every position reads them. Rows and positions past
// the end are clamped for the loads and not stored.
#define Q8_GEMM_POSITIONS 4
GEMM_KERNEL void gemm(__global const weight_t* w, __global const char* in, __global float* out, int out_offset,
                      int n, int rows, int positions, int accumulate) {
    const int groups = n / GROUP_SIZE;
    FOR_GROUP_UNITS(unit, (rows + GEMM_ROWS - 1) / GEMM_ROWS) {
        ROW_SETUP(unit, (rows + GEMM_ROWS - 1) / GEMM_ROWS);
        if (!row_valid) continue;
        const int r0 = row * GEMM_ROWS;
        __global const weight_t* wr[GEMM_ROWS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; i++) wr[i] = WEIGHT_ROW(w, min(r0 + i, rows - 1), n);
        for (int p0 = 0; p0 < positions; p0 += Q8_GEMM_POSITIONS) {
            __global const char* xp[Q8_GEMM_POSITIONS];
#pragma unroll
            for (int k = 0; k < Q8_GEMM_POSITIONS; k++) xp[k] = Q8_ROW(in, min(p0 + k, positions - 1), n);
            float acc[GEMM_ROWS][Q8_GEMM_POSITIONS];
#pragma unroll
            for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                for (int k = 0; k < Q8_GEMM_POSITIONS; k++) acc[i][k] = 0.0f;
            for (int g = 0; g < groups; g++) {
                int dots[GEMM_ROWS][Q8_GEMM_POSITIONS];
#pragma unroll
                for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                    for (int k = 0; k < Q8_GEMM_POSITIONS; k++) dots[i][k] = 0;
                for (int word = 0; word < GROUP_SIZE / 4; word++) {
                    const int at = q8_int(groups, g, word);
                    int a[GEMM_ROWS], b[Q8_GEMM_POSITIONS];
#pragma unroll
                    for (int i = 0; i < GEMM_ROWS; i++) a[i] = weight_int(wr[i], groups, g, word);
#pragma unroll
                    for (int k = 0; k < Q8_GEMM_POSITIONS; k++) b[k] = ((__global const int*)xp[k])[at];
#pragma unroll
                    for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                        for (int k = 0; k < Q8_GEMM_POSITIONS; k++) dots[i][k] = dot_words(a[i], b[k], dots[i][k]);
                }
#pragma unroll
                for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                    for (int k = 0; k < Q8_GEMM_POSITIONS; k++)
                        acc[i][k] += Q8_TERM((float)dots[i][k], SCALE(WEIGHT_SCALES(wr[i], n), g), Q8_SCALES(xp[k], n)[g]);
            }
#pragma unroll
            for (int i = 0; i < GEMM_ROWS; i++) {
#pragma unroll
                for (int k = 0; k < Q8_GEMM_POSITIONS; k++) {
                    if (r0 + i < rows && p0 + k < positions) {
                        __global float* o = out + out_offset + (size_t)(p0 + k) * rows + r0 + i;
                        *o = accumulate ? *o + acc[i][k] : acc[i][k];
                    }
                }
            }
        }
    }
}
#elif defined(GEMM_MMA)
// GPU family on tensor cores (tensor_cores.cl's m16n8k32 on int8 words): a work-group of GEMM_GROUP_R x
// GEMM_GROUP_P work-items computes a tile of GEMM_TR rows by GEMM_TP positions (KernelSet::gemm), its 8 warps
// in 2 (rows) x 4 (positions), each warp's part in 16 x 8 blocks, Q8_MB x Q8_NB of them. The tile passes
// through local memory a step of Q8_STEP_WORDS words of k at a time (64 weights where groups hold whole
// steps of them, else 32: a step's loads wait on memory, so fewer, longer steps) with the scales of the
// step's group, double-buffered, so one barrier per step suffices. A group's integer dots are exact in any
// order; after its last step each element adds its term (Q8_TERM) to its sum, the reference's terms in
// the reference's order, so the sums are the reference's bits.
#if GROUP_SIZE % 32 != 0
#error "Q8_0's tensor-core gemm takes groups of a multiple of 32 weights"
#endif
#define Q8_MB (GEMM_TR / 32)  // blocks of a warp's GEMM_TR / 2 rows
#define Q8_NB (GEMM_TP / 32)  // blocks of a warp's GEMM_TP / 4 positions
// A work-item's elements of its warp's D fragments: element i of block (mb, nb) is Q8_ELEMENT(mb, nb, i).
#define Q8_ELEMENTS (Q8_MB * Q8_NB * 4)
#define Q8_ELEMENT(mb, nb, i) (((mb) * Q8_NB + (nb)) * 4 + (i))
#define Q8_STEP_WORDS (GROUP_SIZE % 64 == 0 ? 16 : 8)
#define Q8_STEPS_PER_GROUP (GROUP_SIZE / (4 * Q8_STEP_WORDS))
// A local row of a step: its words padded by 4, so that a fragment's reads (8 rows g, words t) fall in
// distinct banks.
#define Q8_STRIDE (Q8_STEP_WORDS + 4)
#define Q8_THREADS GEMM_THREADS
#define Q8_A_LOADS (GEMM_TR * Q8_STEP_WORDS / Q8_THREADS)
#define Q8_B_LOADS (GEMM_TP * Q8_STEP_WORDS / Q8_THREADS)
#ifdef MMA_EMULATE
#define Q8_MMA_SCRATCH (Q8_THREADS / 32 * (Q8_MB * 128 + Q8_NB * 64))
#else
#define Q8_MMA_SCRATCH 1
#endif

// One buffer of a step: the words of the tile's rows and positions, and their scales of the step's group.
typedef struct {
    uint w[GEMM_TR * Q8_STRIDE], x[GEMM_TP * Q8_STRIDE];
    float ws[GEMM_TR], xs[GEMM_TP];
} q8_step_t;

// This work-item's share of step s's words and scales: word e % Q8_STEP_WORDS of tile row (position)
// e / Q8_STEP_WORDS, e = flat + i * Q8_THREADS, and the scale of row (then position) flat. Rows and
// positions past the end load the last.
typedef struct {
    uint w[Q8_A_LOADS], x[Q8_B_LOADS];
    float scale;
} q8_loads_t;
inline q8_loads_t q8_load(__global const weight_t* w, __global const char* in, int r0, int rows, int p0,
                          int positions, int n, int s, int flat) {
    const int groups = n / GROUP_SIZE, g = s / Q8_STEPS_PER_GROUP, k0 = s % Q8_STEPS_PER_GROUP * Q8_STEP_WORDS;
    q8_loads_t l;
#pragma unroll
    for (int i = 0; i < Q8_A_LOADS; i++) {
        const int e = flat + i * Q8_THREADS, r = min(r0 + e / Q8_STEP_WORDS, rows - 1);
        l.w[i] = (uint)weight_int(WEIGHT_ROW(w, r, n), groups, g, k0 + e % Q8_STEP_WORDS);
    }
#pragma unroll
    for (int i = 0; i < Q8_B_LOADS; i++) {
        const int e = flat + i * Q8_THREADS, p = min(p0 + e / Q8_STEP_WORDS, positions - 1);
        l.x[i] = ((__global const uint*)Q8_ROW(in, p, n))[q8_int(groups, g, k0 + e % Q8_STEP_WORDS)];
    }
    l.scale = 0.0f;
    if (flat < GEMM_TR)
        l.scale = SCALE(WEIGHT_SCALES(WEIGHT_ROW(w, min(r0 + flat, rows - 1), n), n), g);
    else if (flat < GEMM_TR + GEMM_TP)
        l.scale = Q8_SCALES(Q8_ROW(in, min(p0 + flat - GEMM_TR, positions - 1), n), n)[g];
    return l;
}
inline void q8_store(__local q8_step_t* b, const q8_loads_t* l, int flat) {
#pragma unroll
    for (int i = 0; i < Q8_A_LOADS; i++) {
        const int e = flat + i * Q8_THREADS;
        b->w[e / Q8_STEP_WORDS * Q8_STRIDE + e % Q8_STEP_WORDS] = l->w[i];
    }
#pragma unroll
    for (int i = 0; i < Q8_B_LOADS; i++) {
        const int e = flat + i * Q8_THREADS;
        b->x[e / Q8_STEP_WORDS * Q8_STRIDE + e % Q8_STEP_WORDS] = l->x[i];
    }
    if (flat < GEMM_TR)
        b->ws[flat] = l->scale;
    else if (flat < GEMM_TR + GEMM_TP)
        b->xs[flat - GEMM_TR] = l->scale;
}

// dots += A B for the warp's blocks over the 32 weights of step buffer b from its word k8, the warp's tile
// part starting at row wr and position wp: each lane's fragments read from local memory.
inline void q8_mma(__local const q8_step_t* b, int k8, int wr, int wp, int* dots, __local uint* scratch) {
    const int lane = gemm_flat() % 32, g = lane / 4, t = lane % 4;
    uint a[Q8_MB][4], x[Q8_NB][2];
#pragma unroll
    for (int mb = 0; mb < Q8_MB; mb++) {
        __local const uint* row = b->w + (wr + mb * 16 + g) * Q8_STRIDE + k8 + t;
        a[mb][0] = row[0];
        a[mb][1] = row[8 * Q8_STRIDE];
        a[mb][2] = row[4];
        a[mb][3] = row[8 * Q8_STRIDE + 4];
    }
#pragma unroll
    for (int nb = 0; nb < Q8_NB; nb++) {
        __local const uint* pos = b->x + (wp + nb * 8 + g) * Q8_STRIDE + k8 + t;
        x[nb][0] = pos[0];
        x[nb][1] = pos[4];
    }
#ifdef MMA_EMULATE
    __local uint* a_at = scratch + gemm_flat() / 32 * (Q8_MB * 128 + Q8_NB * 64);
    __local uint* x_at = a_at + Q8_MB * 128;
    for (int mb = 0; mb < Q8_MB; mb++) mma_publish_a(a_at + mb * 128, a[mb]);
    for (int nb = 0; nb < Q8_NB; nb++) mma_publish_b(x_at + nb * 64, x[nb]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int mb = 0; mb < Q8_MB; mb++)
        for (int nb = 0; nb < Q8_NB; nb++)
            for (int i = 0; i < 4; i++) {
                int* d = dots + Q8_ELEMENT(mb, nb, i);
                *d = mma_element_s8(a_at + mb * 128, x_at + nb * 64, i, *d);
            }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next fragments overwrite these
#else
#pragma unroll
    for (int mb = 0; mb < Q8_MB; mb++)
#pragma unroll
        for (int nb = 0; nb < Q8_NB; nb++) MMA_S8(dots + Q8_ELEMENT(mb, nb, 0), a[mb], x[nb]);
#endif
}

GEMM_KERNEL void gemm(__global const weight_t* w, __global const char* in, __global float* out, int out_offset,
                      int n, int rows, int positions, int accumulate) {
    __local q8_step_t steps_[2];
    __local uint scratch[Q8_MMA_SCRATCH];
    const int flat = gemm_flat(), lane = flat % 32, warp = flat / 32;
    const int g = lane / 4, t = lane % 4;
    const int r0 = get_group_id(0) * GEMM_TR, p0 = get_group_id(1) * GEMM_TP;
    // The warp's first row and position in the tile; element e of the work-item's D fragments is the
    // tile's row Q8_TILE_ROW(e) and position Q8_POS(e).
    const int wr = warp % 2 * (GEMM_TR / 2), wp = warp / 2 * (GEMM_TP / 4);
#define Q8_TILE_ROW(e) (wr + (e) / (4 * Q8_NB) * 16 + g + ((e) % 4 >= 2 ? 8 : 0))
#define Q8_POS(e) (wp + (e) / 4 % Q8_NB * 8 + 2 * t + ((e) & 1))
    int dots[Q8_ELEMENTS];
    float acc[Q8_ELEMENTS];
#pragma unroll
    for (int e = 0; e < Q8_ELEMENTS; e++) acc[e] = 0.0f;
    const int steps = n / (4 * Q8_STEP_WORDS);
    q8_loads_t next = q8_load(w, in, r0, rows, p0, positions, n, 0, flat);
    q8_store(&steps_[0], &next, flat);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 0; s < steps; s++) {
        __local const q8_step_t* b = &steps_[s % 2];
        // The next step's loads are in flight while this one multiplies.
        if (s + 1 < steps) next = q8_load(w, in, r0, rows, p0, positions, n, s + 1, flat);
        if (s % Q8_STEPS_PER_GROUP == 0) {
#pragma unroll
            for (int e = 0; e < Q8_ELEMENTS; e++) dots[e] = 0;
        }
#pragma unroll
        for (int k8 = 0; k8 < Q8_STEP_WORDS; k8 += 8) q8_mma(b, k8, wr, wp, dots, scratch);
        if (s % Q8_STEPS_PER_GROUP == Q8_STEPS_PER_GROUP - 1) {
#pragma unroll
            for (int e = 0; e < Q8_ELEMENTS; e++) acc[e] += Q8_TERM((float)dots[e], b->ws[Q8_TILE_ROW(e)], b->xs[Q8_POS(e)]);
        }
        // Every work-item is done with the other buffer: it read it in the step before the last barrier.
        if (s + 1 < steps) q8_store(&steps_[(s + 1) % 2], &next, flat);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (int e = 0; e < Q8_ELEMENTS; e++) {
        const int r = r0 + Q8_TILE_ROW(e), p = p0 + Q8_POS(e);
        if (r < rows && p < positions) {
            __global float* o = out + out_offset + (size_t)p * rows + r;
            *o = accumulate ? *o + acc[e] : acc[e];
        }
    }
#undef Q8_TILE_ROW
#undef Q8_POS
}
#else
// GPU family: a work-group of GEMM_GROUP_R x GEMM_GROUP_P (16 x 16) work-items computes a tile of GEMM_TILE
// rows by GEMM_TILE positions (the shape's own build's tile, gemm_gpu.cl's default: KernelSet::gemm), each
// work-item GEMM_BLOCK x GEMM_BLOCK of it (rows and positions 16 apart). Group by group, the
// tile's words pass through local memory Q8_TILE_WORDS at a time and each work-item forms its elements'
// integer dot products; then the group's scales fold them into the sums.
#if GEMM_TR != GEMM_TP
#error "Q8_0's gemm computes square tiles"
#endif
#define GEMM_TILE GEMM_TR
#define GEMM_BLOCK (GEMM_TILE / GEMM_GROUP_R)
#define Q8_TILE_WORDS (GROUP_SIZE / 4 < 16 ? GROUP_SIZE / 4 : 16)
GEMM_KERNEL void gemm(__global const weight_t* w, __global const char* in, __global float* out, int out_offset,
                      int n, int rows, int positions, int accumulate) {
    __local int wt[Q8_TILE_WORDS][GEMM_TILE + 1], xt[Q8_TILE_WORDS][GEMM_TILE + 1];
    __local float ws[GEMM_TILE], xs[GEMM_TILE];
    const int lr = get_local_id(0), lp = get_local_id(1), flat = gemm_flat();
    const int r0 = get_group_id(0) * GEMM_TILE, p0 = get_group_id(1) * GEMM_TILE;
    const int groups = n / GROUP_SIZE;
    float acc[GEMM_BLOCK][GEMM_BLOCK];
#pragma unroll
    for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
        for (int k = 0; k < GEMM_BLOCK; k++) acc[i][k] = 0.0f;
    for (int g = 0; g < groups; g++) {  // (the same trips for every work-item: barriers)
        for (int t = flat; t < GEMM_TILE; t += GEMM_THREADS) {
            ws[t] = r0 + t < rows ? SCALE(WEIGHT_SCALES(WEIGHT_ROW(w, r0 + t, n), n), g) : 0.0f;
            xs[t] = p0 + t < positions ? Q8_SCALES(Q8_ROW(in, p0 + t, n), n)[g] : 0.0f;
        }
        int dots[GEMM_BLOCK][GEMM_BLOCK];
#pragma unroll
        for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
            for (int k = 0; k < GEMM_BLOCK; k++) dots[i][k] = 0;
        for (int word0 = 0; word0 < GROUP_SIZE / 4; word0 += Q8_TILE_WORDS) {
            for (int e = flat; e < GEMM_TILE * Q8_TILE_WORDS; e += GEMM_THREADS) {
                const int t = e / Q8_TILE_WORDS, kk = e - t * Q8_TILE_WORDS, word = word0 + kk;  // (see attention.cl)
                const int at = q8_int(groups, g, word);
                const int inside = word < GROUP_SIZE / 4;
                wt[kk][t] = inside && r0 + t < rows ? weight_int(WEIGHT_ROW(w, r0 + t, n), groups, g, word) : 0;
                xt[kk][t] = inside && p0 + t < positions ? ((__global const int*)Q8_ROW(in, p0 + t, n))[at] : 0;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            const int steps = min(Q8_TILE_WORDS, GROUP_SIZE / 4 - word0);
            for (int kk = 0; kk < steps; kk++) {
                int a[GEMM_BLOCK], b[GEMM_BLOCK];
#pragma unroll
                for (int i = 0; i < GEMM_BLOCK; i++) a[i] = wt[kk][lr + i * GEMM_GROUP_R];
#pragma unroll
                for (int k = 0; k < GEMM_BLOCK; k++) b[k] = xt[kk][lp + k * GEMM_GROUP_P];
#pragma unroll
                for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
                    for (int k = 0; k < GEMM_BLOCK; k++) dots[i][k] = dot_words(a[i], b[k], dots[i][k]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);  // the next words overwrite what these products read
        }
#pragma unroll
        for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
            for (int k = 0; k < GEMM_BLOCK; k++)
                acc[i][k] += Q8_TERM((float)dots[i][k], ws[lr + i * GEMM_GROUP_R], xs[lp + k * GEMM_GROUP_P]);
        barrier(CLK_LOCAL_MEM_FENCE);  // the next group's scales overwrite these
    }
#pragma unroll
    for (int i = 0; i < GEMM_BLOCK; i++) {
#pragma unroll
        for (int k = 0; k < GEMM_BLOCK; k++) {
            const int r = r0 + lr + i * GEMM_GROUP_R, p = p0 + lp + k * GEMM_GROUP_P;
            if (r < rows && p < positions) {
                __global float* o = out + out_offset + (size_t)p * rows + r;
                *o = accumulate ? *o + acc[i][k] : acc[i][k];
            }
        }
    }
}
#endif

// RoPE of every position of the batch, in place: q (positions, dim) and the keys the batch wrote to the
// cache (positions from pos on, kv_dim each), one (even, odd) pair per work-item.
__kernel void rope_rows(__global float* q, __global float* key_cache, __global const float* rope, int dim, int kv_dim,
                        int head_size, int pos, int positions) {
    const int pair = get_global_id(0), p = get_global_id(1);
    if (pair >= (dim + kv_dim) / 2 || p >= positions) return;
    int r = 2 * pair;
    __global float* v = q + (size_t)p * dim;
    if (r >= dim) {
        r -= dim;
        v = key_cache + (size_t)(pos + p) * kv_dim;
    }
    rope_pair(v, r, v[r], v[r + 1], rope + (size_t)(pos + p) * head_size + 2 * ((r % head_size) / 2));
}

// SwiGLU of `count` elements in place: gate = silu(gate) * up.
__kernel void swiglu(__global float* gate, __global const float* up, int count) {
    const int i = get_global_id(0);
    if (i < count) gate[i] = swiglu_of(gate[i], up[i]);
}
#endif
