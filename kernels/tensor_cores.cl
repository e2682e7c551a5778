// Tensor cores for prefill's GEMMs (gemm_gpu.cl and prefill_quantized.cl with GEMM_MMA): NVIDIA's warp-wide
// matrix multiply-adds through inline PTX, mma.sync.m16n8k8 on TF32 operands with fp32 accumulation for
// float weights, mma.sync.m16n8k32 on int8 operands with int32 accumulation for Q8_0. The host defines
// GEMM_MMA where the compiler takes inline PTX (KernelSet::warp_shuffles) and the GPU has these tensor
// cores (compute capability 8.0 on); MMA_EMULATE (tests, any device) runs the same kernels with the
// instruction computed through local memory, so that the fragments' index math runs where PTX cannot.
//
// A warp of 32 work-items (consecutive local ids) holds D (16 x 8) += A (16 x 8) B (8 x 8) in registers
// as the PTX ISA lays the fragments out, an element of A and B being a 32-bit word: a TF32 value, or four
// int8 values along k (m16n8k32's 32 columns of A and rows of B are 8 such words). With g = lane / 4 and
// t = lane % 4,
//   A: a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4]
//   B: b0 = B[t][g], b1 = B[t + 4][g]
//   D: d0 = D[g][2t], d1 = D[g][2t + 1], d2 = D[g + 8][2t], d3 = D[g + 8][2t + 1]
//
// TF32 keeps 10 of fp32's 23 mantissa bits, too few for run.c's text. Each operand is split into a
// TF32 head (x rounded to TF32) and its remainder, exact in fp32, which goes in whole: the tensor cores
// read a TF32 operand's top 19 bits and ignore the low 13, cutting the remainder toward zero (x = hi + lo
// to about 21 bits, without the two instructions an operand that rounding it would take). A product is
// a_lo b_hi + a_hi b_lo + a_hi b_hi (3xTF32, the small terms first: the dropped a_lo b_lo is about 2^-22
// of it), each product exact in the fp32 accumulator. An f16 weight is a TF32 value (10 mantissa bits, a
// wider exponent): its a_lo is zero and its term is left out. Int8 products are exact. With PROMPT_FAST
// (--prompt-precision fast) a float product is a_hi b_hi alone: single-pass TF32, as cuBLAS's TF32 mode.
#ifdef GEMM_MMA
// x rounded to TF32 (to nearest, ties away from zero, as cvt.rna.tf32.f32): its low 13 bits cleared.
inline uint tf32_round(float x) { return (as_uint(x) + 0x1000u) & 0xffffe000u; }
inline void tf32_split(float x, uint* hi, uint* lo) {
    *hi = tf32_round(x);
    *lo = as_uint(x - as_float(*hi));  // exact in fp32; the tensor cores read its TF32 part
}

#ifdef MMA_EMULATE
// The emulation: every lane of a warp publishes its fragments' words of A (16 x 8, row-major) and B (8 x 8,
// k-major) to the warp's local memory, where they stand as the matrices, and each lane then computes its
// elements of D from them. (The kernels call these alike in every work-item, with barriers between
// publishing and computing that stand for the warp's synchrony.)
inline int mma_lane(void) { return (get_local_id(1) * get_local_size(0) + get_local_id(0)) % 32; }
inline void mma_publish_a(__local uint* a, const uint* frag) {
    const int g = mma_lane() / 4, t = mma_lane() % 4;
    a[g * 8 + t] = frag[0];
    a[(g + 8) * 8 + t] = frag[1];
    a[g * 8 + t + 4] = frag[2];
    a[(g + 8) * 8 + t + 4] = frag[3];
}
inline void mma_publish_b(__local uint* b, const uint* frag) {
    const int g = mma_lane() / 4, t = mma_lane() % 4;
    b[t * 8 + g] = frag[0];
    b[(t + 4) * 8 + g] = frag[1];
}
// The row and column of element i of this lane's D fragment.
inline int mma_row(int i) { return mma_lane() / 4 + (i >= 2 ? 8 : 0); }
inline int mma_col(int i) { return 2 * (mma_lane() % 4) + (i & 1); }
// Element i of this lane's D fragment after D += A B, in k's order: TF32 words (their top 19 bits, as
// the tensor cores read them), or int8 ones.
inline float tf32_read(uint word) { return as_float(word & 0xffffe000u); }
inline float mma_element(__local const uint* a, __local const uint* b, int i, float d) {
    for (int k = 0; k < 8; k++) d = fma(tf32_read(a[mma_row(i) * 8 + k]), tf32_read(b[k * 8 + mma_col(i)]), d);
    return d;
}
#ifdef QUANTIZED_WEIGHTS
inline int mma_element_s8(__local const uint* a, __local const uint* b, int i, int d) {
    for (int k = 0; k < 8; k++) d = dot_words(a[mma_row(i) * 8 + k], b[k * 8 + mma_col(i)], d);
    return d;
}
#endif
#else
#define MMA_TF32(d0, d1, d2, d3, a, b)                                                                            \
    __asm__ volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
                     "{%0,%1,%2,%3};"                                                                              \
                     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)                                                      \
                     : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
#define MMA_S8(d, a, b)                                                                                          \
    __asm__ volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
                     "{%0,%1,%2,%3};"                                                                           \
                     : "+r"((d)[0]), "+r"((d)[1]), "+r"((d)[2]), "+r"((d)[3])                                   \
                     : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
#endif
#endif
