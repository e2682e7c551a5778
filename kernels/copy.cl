// Copies one float4 per work-item: the simplest full-bandwidth kernel, used to measure device copy
// bandwidth and to check that kernels run at all. The global size is the number of float4s.
__kernel void copy_f32(__global const float4* src, __global float4* dst) {
    const size_t i = get_global_id(0);
    dst[i] = src[i];
}
