// Sampler tests: run.c's RNG, softmax, argmax, multinomial and top-p sampling, each checked
// against a computation written out independently here.
#include <gtest/gtest.h>

#include <limits>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

#include "llamacl/sampler.hpp"

namespace {

using llamacl::Sampler;

// run.c's random_u32 / random_f32, written out again so the library is checked against the
// formula rather than against itself.
struct RefRng {
    std::uint64_t s;
    std::uint32_t u32() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return static_cast<std::uint32_t>((s * 0x2545F4914F6CDD1DULL) >> 32);
    }
    float f32() { return static_cast<float>(u32() >> 8) / 16777216.0f; }
};

// softmax of x / temperature in the order run.c computes it.
std::vector<float> ref_probs(std::vector<float> x, float temperature) {
    for (float& v : x) v /= temperature;
    float max_val = x[0];
    for (const float v : x) max_val = v > max_val ? v : max_val;
    float sum = 0.0f;
    for (float& v : x) {
        v = std::exp(v - max_val);
        sum += v;
    }
    for (float& v : x) v /= sum;
    return x;
}

TEST(SamplerRng, MatchesTheXorshiftFormula) {
    // The library's state and outputs follow RefRng draw for draw.
    std::uint64_t state = 42;
    RefRng ref{42};
    for (int i = 0; i < 1000; i++) {
        const std::uint32_t want = ref.u32();
        ASSERT_EQ(llamacl::random_u32(state), want) << "draw " << i;
        ASSERT_EQ(state, ref.s) << "draw " << i;
    }
    // A fixed value, so a mistake copied into both implementations would still be caught.
    std::uint64_t s = 1;
    s ^= s >> 12;  // 1
    s ^= s << 25;  // 1 | 1<<25
    s ^= s >> 27;  // unchanged: nothing above bit 26
    EXPECT_EQ(s, 0x2000001ULL);
    std::uint64_t state1 = 1;
    EXPECT_EQ(llamacl::random_u32(state1),
              static_cast<std::uint32_t>((0x2000001ULL * 0x2545F4914F6CDD1DULL) >> 32));
    EXPECT_EQ(state1, 0x2000001ULL);
}

TEST(SamplerRng, FloatsUseTheTop24Bits) {
    std::uint64_t state = 1234567;
    RefRng ref{1234567};
    for (int i = 0; i < 1000; i++) {
        const float f = llamacl::random_f32(state);
        ASSERT_EQ(f, ref.f32()) << "draw " << i;
        ASSERT_GE(f, 0.0f);
        ASSERT_LT(f, 1.0f);
    }
}

TEST(SamplerSoftmax, MatchesRunC) {
    std::vector<float> x = {1.0f, -2.5f, 3.25f, 0.0f, 3.25f, -100.0f};
    const std::vector<float> want = ref_probs(x, 1.0f);
    llamacl::softmax(x);
    for (std::size_t i = 0; i < x.size(); i++) EXPECT_EQ(x[i], want[i]) << i;
    // Subtracting the max keeps huge logits finite.
    std::vector<float> big = {1000.0f, 1001.0f};
    llamacl::softmax(big);
    EXPECT_FLOAT_EQ(big[0], 1.0f / (1.0f + std::exp(1.0f)));
    EXPECT_FLOAT_EQ(big[1], std::exp(1.0f) / (1.0f + std::exp(1.0f)));
    std::vector<float> one = {-7.0f};
    llamacl::softmax(one);
    EXPECT_EQ(one[0], 1.0f);
}

TEST(SamplerGreedy, PicksTheFirstMaximumAndDrawsNoRandomNumber) {
    Sampler s(5, 0.0f, 0.9f, 7);
    std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
    const std::vector<float> before = logits;
    EXPECT_EQ(s.sample(logits), 1);
    EXPECT_EQ(logits, before);  // greedy leaves the logits alone
    std::vector<float> last = {-3.0f, -2.0f, -1.0f, -4.0f, -0.5f};
    EXPECT_EQ(s.sample(last), 4);
    std::vector<float> first = {9.0f, 9.0f, 9.0f, 9.0f, 9.0f};
    EXPECT_EQ(s.sample(first), 0);
    EXPECT_EQ(s.rng_state(), 7u);
}

// run.c's sample_argmax loop, written out again.
int ref_argmax(const std::vector<float>& p) {
    int max_i = 0;
    float max_p = p[0];
    for (std::size_t i = 1; i < p.size(); i++) {
        if (p[i] > max_p) {
            max_i = static_cast<int>(i);
            max_p = p[i];
        }
    }
    return max_i;
}

TEST(SamplerGreedy, ArgmaxAgreesWithRunCsLoopOnTiesZerosInfinitiesAndNaNs) {
    // Lengths below, at and past the scan's lanes, with values drawn from a small set so that ties,
    // signed zeros, infinities and NaNs (first, last, everywhere) all occur in every position.
    const std::vector<float> pool = {NAN, -0.0f, 0.0f, -INFINITY, INFINITY, 1.0f, 2.0f, -1.0f};
    RefRng rng{12345};
    int nan_first = 0, all_nan = 0;
    for (int trial = 0; trial < 20000; ++trial) {
        std::vector<float> v(1 + rng.u32() % 70);
        for (float& x : v) x = pool[rng.u32() % (trial % 2 ? pool.size() : 4)];  // odd: whole pool
        nan_first += std::isnan(v[0]);
        all_nan += std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
        ASSERT_EQ(llamacl::sample_argmax(v), ref_argmax(v)) << "trial " << trial << ", length " << v.size();
    }
    EXPECT_GT(nan_first, 100);  // the cases that matter were drawn
    EXPECT_GT(all_nan, 10);
    // A long row like a vocabulary's, the maximum once near the end and once tied earlier.
    std::vector<float> logits(32000);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;
    logits[31990] = 50.0f;
    EXPECT_EQ(llamacl::sample_argmax(logits), 31990);
    logits[17] = 50.0f;
    EXPECT_EQ(llamacl::sample_argmax(logits), 17);
}

TEST(SamplerTinyTemperature, WhenTheScaledLogitsOverflowTheTokenIsTheArgmax) {
    // 5 / 1e-38 overflows float to inf (run.c's softmax would then compute inf - inf), and so does every
    // logit of the second vector, to -inf (-inf - -inf). With and without top-p; the coin is drawn as
    // for any positive temperature.
    for (const float topp : {0.0f, 0.9f}) {
        Sampler s(5, 1e-38f, topp, 7);
        std::vector<float> positive = {0.5f, 5.0f, -1.0f, 2.9f, 2.0f};
        EXPECT_EQ(s.sample(positive), 1);
        std::vector<float> negative = {-5.0f, -4.0f, -3.5f, -6.0f, -4.5f};
        EXPECT_EQ(s.sample(negative), 2);
        RefRng rng{7};
        rng.u32();
        rng.u32();
        EXPECT_EQ(s.rng_state(), rng.s);
    }
}

TEST(SamplerMultinomial, NanOrInfiniteLogitsTakeRunCsPathToTheLastToken) {
    // A broken model's logits: run.c's softmax makes every probability NaN (inf - inf, or NaN itself), no
    // cdf comparison holds, and sample_mult falls through to the last token.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (const float topp : {0.0f, 1.0f})
        for (const std::vector<float>& broken : {std::vector<float>(5, nan), std::vector<float>(5, inf),
                                                 std::vector<float>{0.5f, nan, 1.0f, 2.0f, 0.0f}}) {
            Sampler s(5, 1.0f, topp, 3);
            std::vector<float> logits = broken;
            EXPECT_EQ(s.sample(logits), 4) << "top-p " << topp << ", first logit " << broken[0];
        }
}

TEST(SamplerMultinomial, MatchesADirectComputation) {
    // Five tokens with clearly different probabilities at temperature 0.8.
    const std::vector<float> logits = {0.2f, 1.5f, -0.7f, 1.1f, 0.4f};
    const float temperature = 0.8f;
    const std::vector<float> probs = ref_probs(logits, temperature);
    for (const float topp : {0.0f, 1.0f, -0.5f, 1.5f}) {  // all mean plain multinomial sampling
        SCOPED_TRACE(topp);
        Sampler s(5, temperature, topp, 20240229);
        RefRng rng{20240229};
        std::vector<int> counts(5, 0);
        for (int step = 0; step < 2000; step++) {
            const float coin = rng.f32();
            // The first index whose cumulative probability exceeds the coin.
            int want = 4;
            float cdf = 0.0f;
            for (int i = 0; i < 5; i++) {
                cdf += probs[i];
                if (coin < cdf) {
                    want = i;
                    break;
                }
            }
            std::vector<float> x = logits;
            ASSERT_EQ(s.sample(x), want) << "step " << step;
            ASSERT_EQ(x, probs) << "sample() leaves the probabilities in the logits";
            counts[want]++;
        }
        // The crafted distribution is actually exercised: every token gets drawn.
        for (int i = 0; i < 5; i++) EXPECT_GT(counts[i], 0) << i;
        EXPECT_EQ(s.rng_state(), rng.s);
    }
}

TEST(SamplerTopP, CutoffExcludesUnlikelyTokensAndTiesKeepIndexOrder) {
    // Tokens 1 and 2 tie for the top, 4 is next; 0, 3 and 5 are tiny. With topp = 0.7:
    // cutoff (1 - 0.7) / 5 = 0.06 drops 0, 3 and 5. Sorted descending (stable): 1, 2, 4.
    // 1 alone does not exceed 0.7, 1 + 2 does, so the nucleus is {1, 2} and token 1 is picked
    // when coin * (p1 + p2) < p1. An unstable sort that put 2 before 1 would flip the choice.
    const std::vector<float> logits = {-2.0f, 2.0f, 2.0f, -3.0f, 1.0f, -2.5f};
    const float topp = 0.7f;
    const std::vector<float> p = ref_probs(logits, 1.0f);
    const float cutoff = (1.0f - topp) / 5.0f;
    ASSERT_LT(p[0], cutoff);
    ASSERT_LT(p[3], cutoff);
    ASSERT_LT(p[5], cutoff);
    ASSERT_GE(p[4], cutoff);
    ASSERT_EQ(p[1], p[2]);
    ASSERT_LE(p[1], topp);
    ASSERT_GT(p[1] + p[2], topp);

    Sampler s(6, 1.0f, topp, 99);
    RefRng rng{99};
    std::set<int> seen;
    for (int step = 0; step < 500; step++) {
        const float coin = rng.f32();
        const float r = coin * (p[1] + p[2]);
        const int want = r < p[1] ? 1 : 2;
        std::vector<float> x = logits;
        const int got = s.sample(x);
        ASSERT_EQ(got, want) << "step " << step << " coin " << coin;
        seen.insert(got);
    }
    EXPECT_EQ(seen, (std::set<int>{1, 2}));
}

TEST(SamplerTopP, NucleusReachingPastTheTies) {
    // Same logits, topp = 0.95: the nucleus now reaches past the tied pair 1, 2 into 4 and
    // beyond, while the cutoff (0.05 / 5 = 0.01) still drops the least likely token(s).
    const std::vector<float> logits = {-2.0f, 2.0f, 2.0f, -3.0f, 1.0f, -2.5f};
    const float topp = 0.95f;
    const std::vector<float> p = ref_probs(logits, 1.0f);
    const float cutoff = (1.0f - topp) / 5.0f;
    // Build the expected candidate list the long way: keep, sort stably by hand (the data has
    // only the one tie), accumulate.
    std::vector<int> order;
    for (const int i : {1, 2, 4, 0, 5, 3}) {  // descending probability, ties by index
        if (p[i] >= cutoff) order.push_back(i);
    }
    ASSERT_LT(order.size(), 6u) << "the cutoff should drop at least one token";
    float cumulative = 0.0f;
    std::size_t last = order.size() - 1;
    for (std::size_t k = 0; k < order.size(); k++) {
        cumulative += p[order[k]];
        if (cumulative > topp) {
            last = k;
            break;
        }
    }
    ASSERT_GE(last, 2u) << "the nucleus should reach past the tied pair";

    Sampler s(6, 1.0f, topp, 5);
    RefRng rng{5};
    std::set<int> seen;
    for (int step = 0; step < 1000; step++) {
        const float r = rng.f32() * cumulative;
        int want = order[last];
        float cdf = 0.0f;
        for (std::size_t k = 0; k <= last; k++) {
            cdf += p[order[k]];
            if (r < cdf) {
                want = order[k];
                break;
            }
        }
        std::vector<float> x = logits;
        const int got = s.sample(x);
        ASSERT_EQ(got, want) << "step " << step;
        seen.insert(got);
    }
    for (std::size_t k = 0; k <= last; k++) EXPECT_TRUE(seen.count(order[k])) << order[k];
    EXPECT_FALSE(seen.count(3));
}

TEST(SamplerTopP, ManyTiesKeepIndexOrder) {
    // 256 tokens in four tiers (logit = i % 4): the 64 tokens with logit 3 tie for the top and
    // alone exceed topp = 0.5, so the nucleus is a prefix of them, and a stable sort keeps that
    // prefix in index order: 3, 7, 11, ... Which token a coin picks depends on that order.
    const int n = 256;
    std::vector<float> logits(n);
    for (int i = 0; i < n; i++) logits[i] = static_cast<float>(i % 4);
    const float topp = 0.5f;
    const std::vector<float> p = ref_probs(logits, 1.0f);
    const float top = p[3];
    float cumulative = 0.0f;
    int last = -1;
    for (int k = 0; k < n / 4; k++) {
        cumulative += top;
        if (cumulative > topp) {
            last = k;
            break;
        }
    }
    ASSERT_GT(last, 4) << "the nucleus should hold several tied tokens";

    Sampler s(n, 1.0f, topp, 424242);
    RefRng rng{424242};
    std::set<int> seen;
    for (int step = 0; step < 300; step++) {
        const float r = rng.f32() * cumulative;
        int want = 3 + 4 * last;
        float cdf = 0.0f;
        for (int k = 0; k <= last; k++) {
            cdf += top;
            if (r < cdf) {
                want = 3 + 4 * k;
                break;
            }
        }
        std::vector<float> x = logits;
        const int got = s.sample(x);
        ASSERT_EQ(got, want) << "step " << step;
        seen.insert(got);
    }
    EXPECT_GT(seen.size(), 3u);
}

TEST(SamplerTopP, NoCandidatesFallsBackToTheMostLikelyToken) {
    // A uniform distribution with topp below 1/n leaves every token under the cutoff
    // (run.c would read before its buffer); the sampler returns the first most likely token.
    Sampler s(4, 1.0f, 0.1f, 3);
    std::vector<float> x = {0.5f, 0.5f, 0.5f, 0.5f};
    EXPECT_EQ(s.sample(x), 0);
    Sampler single(1, 1.0f, 0.5f, 3);
    std::vector<float> y = {2.0f};
    EXPECT_EQ(single.sample(y), 0);
}

std::vector<int> draw(std::uint64_t seed, float topp, int n) {
    const std::vector<float> logits = {0.3f, 0.1f, 0.9f, -0.2f, 0.5f, 0.0f, 0.7f, -0.4f};
    Sampler s(8, 1.2f, topp, seed);
    std::vector<int> out;
    for (int i = 0; i < n; i++) {
        std::vector<float> x = logits;
        out.push_back(s.sample(x));
    }
    return out;
}

TEST(SamplerSeed, SameSeedSameSequenceDifferentSeedDifferent) {
    for (const float topp : {0.0f, 0.9f}) {
        SCOPED_TRACE(topp);
        EXPECT_EQ(draw(1337, topp, 64), draw(1337, topp, 64));
        EXPECT_NE(draw(1337, topp, 64), draw(1338, topp, 64));
    }
}

TEST(SamplerArgs, RejectsMisuse) {
    EXPECT_THROW(Sampler(0, 1.0f, 0.9f, 1), std::invalid_argument);
    Sampler s(3, 1.0f, 0.9f, 1);
    std::vector<float> wrong(4, 0.0f);
    EXPECT_THROW(s.sample(wrong), std::invalid_argument);
}

}  // namespace
