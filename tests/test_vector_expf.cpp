// expf_each (vector_expf.hpp) against the C library's expf, and the functions that use it against their
// scalar transcriptions of run.c.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "llamacl/model_math.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/vector_expf.hpp"

using namespace llamacl;

namespace {

std::uint32_t bits_of(float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b;
}

float float_of(std::uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
}

// Bits equal, or both not a number (a NaN's payload is the library's business).
bool same(float a, float b) { return bits_of(a) == bits_of(b) || (std::isnan(a) && std::isnan(b)); }

}  // namespace

// Every 257th float (16.7 million: every exponent, both signs, the infinities, NaNs and subnormals) and
// the boundaries of the library's special cases, in arrays of every length mod 4: expf's own bits.
TEST(VectorExpf, EveryValueIsTheLibrarysExpf) {
    std::vector<float> x;
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 257) x.push_back(float_of(static_cast<std::uint32_t>(b)));
    for (const float edge : {88.0f, -88.0f, std::nextafter(88.0f, 0.0f), std::nextafter(-88.0f, 0.0f), 0x1.62e42ep6f,
                             0x1.62e430p6f, -0x1.9fe368p6f, -0x1.9fe36ap6f, 0.0f, -0.0f, 0x1.04845ep+5f,
                             std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()})
        x.push_back(edge);
    x.push_back(1.0f);  // a length of 4k + 3, so the scalar tail runs too
    const std::vector<float> in = x;
    expf_each(x.data(), static_cast<int>(x.size()));
    int wrong = 0;
    for (std::size_t i = 0; i < x.size(); i++) {
        if (same(x[i], std::exp(in[i]))) continue;
        if (++wrong <= 5) ADD_FAILURE() << "expf(" << in[i] << ") = " << std::exp(in[i]) << ", vectors " << x[i];
    }
    EXPECT_EQ(wrong, 0) << "of " << x.size();
}

// Where the machine allows it, the vectors are used: an x86-64 glibc with AVX2 and FMA (the CI machine) must not
// fall back to the scalar loop unnoticed.
TEST(VectorExpf, GlibcOnAvx2RunsTheVectors) {
#if defined(__x86_64__) && defined(__GLIBC__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
    EXPECT_TRUE(expf_each_vectorized());
#else
    GTEST_SKIP() << "not x86-64 glibc";
#endif
}

// softmax and swiglu as run.c writes them, one expf at a time, give the same bits.
TEST(VectorExpf, SoftmaxAndSwigluAreRunCsLoops) {
    for (const int n : {1, 3, 4, 7, 64, 65, 172, 513}) {
        std::vector<float> x(static_cast<std::size_t>(n)), hb(x.size()), hb2(x.size());
        std::uint64_t state = 0x1234567u + static_cast<std::uint64_t>(n);
        for (std::size_t i = 0; i < x.size(); i++) {
            x[i] = (random_f32(state) - 0.5f) * 40.0f;
            hb[i] = (random_f32(state) - 0.5f) * 30.0f;
            hb2[i] = random_f32(state) - 0.5f;
        }
        std::vector<float> want = x;
        float max_val = want[0];
        for (std::size_t i = 1; i < want.size(); i++)
            if (want[i] > max_val) max_val = want[i];
        float sum = 0.0f;
        for (float& v : want) {
            v = expf(v - max_val);
            sum += v;
        }
        for (float& v : want) v /= sum;
        softmax(x);
        EXPECT_EQ(std::memcmp(x.data(), want.data(), x.size() * sizeof(float)), 0) << "softmax of " << n;

        std::vector<float> silu = hb;
        for (std::size_t i = 0; i < silu.size(); i++) {
            float val = silu[i];
            val *= (1.0f / (1.0f + expf(-val)));
            val *= hb2[i];
            silu[i] = val;
        }
        swiglu(hb.data(), hb2.data(), n);
        EXPECT_EQ(std::memcmp(hb.data(), silu.data(), hb.size() * sizeof(float)), 0) << "swiglu of " << n;
    }
}
