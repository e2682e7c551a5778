// Sums and maxima over the work-items of a row or of a work-group.

// NVIDIA (the host defines WARP_SHUFFLE where the device's warps are 32 work-items, its compiler takes
// inline PTX and a work-group is whole warps: KernelSet::warp_shuffles): the work-items of a warp, 32
// consecutive local ids, read each other's registers (shfl.sync) without local memory or a barrier. The
// reductions below use it where they stay within a warp, adding the same pairs in the same order as their
// trees through local memory, so the results are the same bits (tests: WarpShuffles). Each step of a
// reduction through local memory is a barrier, and the token kernel's steps are chains of them.
#ifdef WARP_SHUFFLE
// `value` of the work-item whose lane in the warp is this one's XOR `mask`. Every work-item of the warp must call it.
inline float shuffle_xor(float value, int mask) {
    float other;
    __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(other) : "f"(value), "r"(mask));
    return other;
}
// `value` of the warp's first work-item.
inline float lane0(float value) {
    float first;
    __asm__ volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=f"(first) : "f"(value));
    return first;
}
// Sums over aligned runs of `width` work-items within a warp (a power of two up to 32), by butterfly: at
// each step a work-item adds its partner's sum, so every work-item ends with the run's sum, the tree's
// pairs summed in the tree's order (lane 0: (v0 + v16) + (v8 + v24) + ... for 32).
inline float warp_sum(float value, int width) {
    for (int s = width / 2; s > 0; s >>= 1) value += shuffle_xor(value, s);
    return value;
}
inline float warp_max(float value, int width) {
    for (int s = width / 2; s > 0; s >>= 1) value = fmax(value, shuffle_xor(value, s));
    return value;
}
#if ROW_THREADS <= 32
#define ROW_SHUFFLE
#endif
#endif

// Sum of `value` over the ROW_THREADS consecutive work-items that share a row; every work-item of the
// group must call it (it contains barriers when ROW_THREADS > 1, unless a row is within a warp). Ordered
// sums' rows are summed already (dot_quantized.cl's row_dot).
inline float row_sum(float value, __local float* scratch) {
#if SHAPE_FAMILY != SHAPE_GPU || defined(ORDERED_SUMS)
    return value;
#elif defined(ROW_SHUFFLE)
    return warp_sum(value, ROW_THREADS);
#else
    const int lid = get_local_id(0);
    const int lane = lid % ROW_THREADS;
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if (lane < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = scratch[lid - lane];
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch is reused by the next call
    return total;
#endif
}

#ifdef FEW_GROUPS
// row_sum of both components at once (one tree of barriers for the two); scratch holds 2 * LOCAL floats.
inline float2 row_sum2(float2 value, __local float* scratch) {
#if SHAPE_FAMILY != SHAPE_GPU
    return value;
#elif defined(ROW_SHUFFLE)
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) value += (float2)(shuffle_xor(value.x, s), shuffle_xor(value.y, s));
    return value;
#else
    const int lid = get_local_id(0);
    const int lane = lid % ROW_THREADS;
    __local float* other = scratch + LOCAL;
    scratch[lid] = value.x;
    other[lid] = value.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if (lane < s) {
            scratch[lid] += scratch[lid + s];
            other[lid] += other[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 total = (float2)(scratch[lid - lane], other[lid - lane]);
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch is reused by the next call
    return total;
#endif
}
#endif

// Sum (is_max == 0) or maximum (is_max != 0) of `value` over the whole work-group: a tree through local
// memory, level s combining element i with element i + s. With warp shuffles the same tree in two parts:
// the levels that cross warps (s >= 32) each work-item computes for its lane from the warps' values
// after one barrier, and the rest by shuffles; the same pairs, so the same bits.
inline float group_reduce(float value, int is_max, __local float* scratch) {
    const int lid = get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
#ifdef WARP_SHUFFLE
    float v[LOCAL / 32];  // lane lid % 32 of each warp
#pragma unroll
    for (int w = 0; w < LOCAL / 32; w++) v[w] = scratch[lid % 32 + 32 * w];
#pragma unroll
    for (int m = LOCAL / 64; m > 0; m >>= 1)
#pragma unroll
        for (int w = 0; w < m; w++) v[w] = is_max ? fmax(v[w], v[w + m]) : v[w] + v[w + m];
    // Lane 0's, as the tree's: fmax of zeros of both signs may differ in the other lanes.
    const float total = lane0(is_max ? warp_max(v[0], 32) : warp_sum(v[0], 32));
#else
    for (int s = LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] = is_max ? fmax(scratch[lid], scratch[lid + s]) : scratch[lid] + scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = scratch[0];
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

#ifdef ORDERED_SUMS
// Ordered sums (shape.cl) over the work-group, a round at a time: each work-item has put its value of the
// round in scratch[its local id], and the first work-item adds the round's first `count` to *sum in that
// order (from local memory, rather than wait on a load from global memory for each). Every work-item calls it.
inline void add_round_in_order(__private float* sum, __local float* scratch, int count) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0)
        for (int k = 0; k < count; k++) *sum += scratch[k];
    barrier(CLK_LOCAL_MEM_FENCE);  // the round is added before the next one overwrites it
}
// The first work-item's `value`, for every work-item.
inline float first_items(float value, __local float* scratch) {
    if (get_local_id(0) == 0) scratch[0] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float first = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch is reused by the next call
    return first;
}
#endif

// RMSNorm's epsilon, the model's (Config::norm_eps), which the host defines as a hex float literal; the
// default, run.c's, only keeps the program buildable on its own.
#ifndef NORM_EPS
#define NORM_EPS 1e-5f
#endif
// RMSNorm's scale from the sum of squares ss of n elements: 1/sqrt(ss/n + eps), in run.c's steps.
inline float rms_from_sum(float ss, int n) {
    ss /= (float)n;
    ss += NORM_EPS;
    return 1.0f / sqrt(ss);
}
