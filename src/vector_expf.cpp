#include "llamacl/vector_expf.hpp"

#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace llamacl {

alignas(32) const std::array<std::uint64_t, 32> kGlibcExp2Table = {{
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540}};

bool glibc_expf_fused() {
    // The two builds differ at x = 0x1.04845ep+5, whose exp the fused build rounds to 0x1.f93e38p+46 and
    // the other to 0x1.f93e36p+46.
    volatile float probe = 0x1.04845ep+5f;  // volatile: the compiler must not fold expf at build time
    return std::exp(static_cast<float>(probe)) == 0x1.f93e38p+46f;
}

namespace {

#if defined(__x86_64__)
// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c; kernels/expf.cl has the same in OpenCL C): x / ln2 =
// k/32 + r/32 with an integer k and |r| <= 1/2, so exp(x) = 2^(k/32) * 2^(r/32): the first factor from
// kGlibcExp2Table, the second a cubic in r, all in double, four lanes at a time. Fused: the FMA build,
// whose every multiply-add is one rounding.
constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32, kShift = 0x1.8p+52;
constexpr double kC0 = 0x1.c6af84b912394p-5 / (32 * 32 * 32), kC1 = 0x1.ebfce50fac4f3p-3 / (32 * 32),
                 kC2 = 0x1.62e42ff0c52d6p-1 / 32;

// Compiled for AVX2 with FMA (called only where the CPU has both), every function of it: the plain
// build's multiply-adds stay two roundings, as the build contracts none (-ffp-contract=off:
// CMakeLists.txt).
#define LLAMACL_AVX2_FMA __attribute__((target("avx2,fma")))
#define LLAMACL_INLINE inline __attribute__((always_inline)) LLAMACL_AVX2_FMA

template <bool Fused>
struct Exp4 {
    // a * b + c, as the build computes it.
    static LLAMACL_INLINE __m256d mul_add(__m256d a, __m256d b, __m256d c) {
        if constexpr (Fused)
            return _mm256_fmadd_pd(a, b, c);
        else
            return _mm256_add_pd(_mm256_mul_pd(a, b), c);
    }
    // x[0..4) in place. Lanes of |x| >= 88 or not a number (overflow, underflow and the special values:
    // the library's own branches) are left to expf.
    static LLAMACL_INLINE void run(float* x) {
        const __m128 xf = _mm_loadu_ps(x);
        const __m128i abstop = _mm_and_si128(_mm_srli_epi32(_mm_castps_si128(xf), 20), _mm_set1_epi32(0x7ff));
        if (_mm_movemask_epi8(_mm_cmpgt_epi32(abstop, _mm_set1_epi32(0x42a))) != 0) {  // 88.0f's top bits: 0x42b
            for (int i = 0; i < 4; i++) x[i] = std::exp(x[i]);
            return;
        }
        const __m256d xd = _mm256_cvtps_pd(xf);
        const __m256d inv_ln2_n = _mm256_set1_pd(kInvLn2N), shift = _mm256_set1_pd(kShift);
        // k by the round-to-nearest of adding 1.5 * 2^52: its low bits are k.
        __m256d kd = mul_add(inv_ln2_n, xd, shift);
        const __m256i ki = _mm256_castpd_si256(kd);
        kd = _mm256_sub_pd(kd, shift);
        const __m256d r = mul_add(inv_ln2_n, xd, _mm256_xor_pd(kd, _mm256_set1_pd(-0.0)));
        const __m256i entry = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kGlibcExp2Table.data()),
                                                     _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
        const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(entry, _mm256_slli_epi64(ki, 47)));
        const __m256d z = mul_add(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
        __m256d y = mul_add(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
        y = mul_add(z, _mm256_mul_pd(r, r), y);
        _mm_storeu_ps(x, _mm256_cvtpd_ps(_mm256_mul_pd(y, s)));
    }
};

template <bool Fused>
LLAMACL_AVX2_FMA void expf_vectors(float* x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) Exp4<Fused>::run(x + i);
    for (; i < n; i++) x[i] = std::exp(x[i]);
}
#undef LLAMACL_INLINE
#undef LLAMACL_AVX2_FMA
#endif

using ExpEach = void (*)(float*, int);

void expf_scalar(float* x, int n) {
    for (int i = 0; i < n; i++) x[i] = std::exp(x[i]);
}

// The vectors where they are the library's expf: glibc's build for this CPU, checked once against the
// library on inputs spread over every exponent, both signs and the special values.
ExpEach choose() {
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return expf_scalar;
    const ExpEach vectors = glibc_expf_fused() ? expf_vectors<true> : expf_vectors<false>;
    constexpr int kChecks = 4096;
    float got[kChecks], want[kChecks];
    for (int i = 0; i < kChecks; i++) {
        const std::uint32_t bits = static_cast<std::uint32_t>(i) * 1048573u + 0x9e3779b9u;
        std::memcpy(&got[i], &bits, sizeof bits);
        want[i] = std::exp(got[i]);
    }
    vectors(got, kChecks);
    return std::memcmp(got, want, sizeof got) == 0 ? vectors : expf_scalar;
#else
    return expf_scalar;
#endif
}

ExpEach chosen() {
    static const ExpEach each = choose();
    return each;
}

}  // namespace

void expf_each(float* x, int n) { chosen()(x, n); }

bool expf_each_vectorized() { return chosen() != expf_scalar; }

}  // namespace llamacl
