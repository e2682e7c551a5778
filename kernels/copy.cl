// The probes of bench's ceilings (bandwidth_probes.hpp), also the check that kernels run at all; this file
// is built on its own for them (after tensor_cores.cl for the tensor cores' probe).
//
// Copies one float4 per work-item: the simplest full-bandwidth kernel, used to measure device copy
// bandwidth and to check that kernels run at all. The global size is the number of float4s.
__kernel void copy_f32(__global const float4* src, __global float4* dst) {
    const size_t i = get_global_id(0);
    dst[i] = src[i];
}

// FMA throughput: FMA_CHAINS independent chains of float16 multiply-adds per work-item (enough
// independent work to hide each one's latency on CPUs' SIMD units and GPUs' pipelines), `steps` of each;
// the sum of the chains is stored so that none is optimized away. 2 x 16 x FMA_CHAINS x steps flops per
// work-item.
#define FMA_CHAINS 8
__kernel void fma_f32(__global float* out, float b, float c, int steps) {
    float16 acc[FMA_CHAINS];
    for (int k = 0; k < FMA_CHAINS; k++) acc[k] = (float16)(get_global_id(0) + k);
    for (int i = 0; i < steps; i++) {
#pragma unroll
        for (int k = 0; k < FMA_CHAINS; k++) acc[k] = mad(acc[k], b, c);
    }
    float16 sum = acc[0];
    for (int k = 1; k < FMA_CHAINS; k++) sum += acc[k];
    out[get_global_id(0)] = sum.s0 + sum.s1 + sum.s2 + sum.s3 + sum.s4 + sum.s5 + sum.s6 + sum.s7 + sum.s8 + sum.s9 +
                            sum.sa + sum.sb + sum.sc + sum.sd + sum.se + sum.sf;
}

// Tensor-core throughput, built (MMA_PROBE) after tensor_cores.cl with GEMM_MMA where prefill's GEMMs
// take the tensor cores: the instruction those GEMMs issue, MMA_CHAINS independent accumulators a warp (enough to hide an
// instruction's latency behind the others), `steps` of each. The fragments' values do not change the
// instruction's time; the sums are stored so that none is optimized away. An m16n8k8 TF32 instruction is
// 16 x 8 x 8 multiply-adds a warp, an m16n8k32 int8 one 16 x 8 x 32.
#ifdef MMA_PROBE
#define MMA_CHAINS 8
__kernel void mma_tf32(__global float* out, uint a, uint b, int steps) {
    const uint af[4] = {a, a, a, a}, bf[2] = {b, b};
    float d[MMA_CHAINS][4];
    for (int k = 0; k < MMA_CHAINS; k++) d[k][0] = d[k][1] = d[k][2] = d[k][3] = 0.0f;
    for (int i = 0; i < steps; i++) {
#pragma unroll
        for (int k = 0; k < MMA_CHAINS; k++) MMA_TF32(d[k][0], d[k][1], d[k][2], d[k][3], af, bf);
    }
    float sum = 0.0f;
    for (int k = 0; k < MMA_CHAINS; k++) sum += d[k][0] + d[k][1] + d[k][2] + d[k][3];
    out[get_global_id(0)] = sum;
}
__kernel void mma_s8(__global int* out, uint a, uint b, int steps) {
    const uint af[4] = {a, a, a, a}, bf[2] = {b, b};
    int d[MMA_CHAINS][4];
    for (int k = 0; k < MMA_CHAINS; k++) d[k][0] = d[k][1] = d[k][2] = d[k][3] = 0;
    for (int i = 0; i < steps; i++) {
#pragma unroll
        for (int k = 0; k < MMA_CHAINS; k++) MMA_S8(d[k], af, bf);
    }
    int sum = 0;
    for (int k = 0; k < MMA_CHAINS; k++) sum += d[k][0] + d[k][1] + d[k][2] + d[k][3];
    out[get_global_id(0)] = sum;
}
#endif
