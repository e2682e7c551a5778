// The probes of bench's ceilings (bandwidth_probes.hpp), also the check that kernels run at all; this file
// is built on its own for them.
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
