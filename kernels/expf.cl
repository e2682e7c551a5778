// The forward pass's exponential (softmax, SiLU). Builds of the exact shape on a device with doubles
// (GLIBC_EXPF) compute glibc's expf bit for bit, so that their logits equal the CPU reference's; every
// other build takes the device's exp, which may differ from it in the last bit.
#ifdef GLIBC_EXPF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, shared with exp2f): x / ln2 = k/32 + r/32 with an
// integer k and |r| <= 1/2, so exp(x) = 2^(k/32) * 2^(r/32): the first factor from a table of 2^(i/32)
// (stored with i << 47 taken off its bits, so that adding k << 47 scales it by 2^(k/32 - i/32)), the
// second a cubic in r, all in double. GLIBC_EXPF_FMA: x86-64 glibc's variant for CPUs with FMA, the same
// source compiled with contraction, whose every multiply-add is fused (the host picks the variant its
// own expf is: KernelSet).
constant ulong kExp2Table[32] = {GLIBC_EXP2_TABLE};  // the host's kGlibcExp2Table (vector_expf.hpp)

#ifdef GLIBC_EXPF_FMA
#define MUL_ADD(a, b, c) fma(a, b, c)
#else
#define MUL_ADD(a, b, c) ((a) * (b) + (c))
#endif

float model_exp(float x) {
    const double inv_ln2_n = 0x1.71547652b82fep+0 * 32, shift = 0x1.8p+52;
    const double c0 = 0x1.c6af84b912394p-5 / (32 * 32 * 32), c1 = 0x1.ebfce50fac4f3p-3 / (32 * 32),
                 c2 = 0x1.62e42ff0c52d6p-1 / 32;
    const uint abstop = (as_uint(x) >> 20) & 0x7ff;
    if (abstop >= (as_uint(88.0f) >> 20)) {  // |x| >= 88, or x is not a number
        if (as_uint(x) == as_uint(-INFINITY)) return 0.0f;
        if (abstop >= (as_uint(INFINITY) >> 20)) return x + x;
        if (x > 0x1.62e42ep6f) return INFINITY;  // overflows
        if (x < -0x1.9fe368p6f) return 0.0f;     // underflows
    }
    const double xd = (double)x;
    // k by the round-to-nearest of adding 1.5 * 2^52: its low bits are k.
    double kd = MUL_ADD(inv_ln2_n, xd, shift);
    const ulong ki = as_ulong(kd);
    kd -= shift;
    const double r = MUL_ADD(inv_ln2_n, xd, -kd);
    const double s = as_double(kExp2Table[ki % 32] + (ki << 47));
    const double z = MUL_ADD(c0, r, c1);
    double y = MUL_ADD(c2, r, 1.0);
    y = MUL_ADD(z, r * r, y);
    return (float)(y * s);
}
#undef MUL_ADD

#else
float model_exp(float x) { return exp(x); }
#endif
