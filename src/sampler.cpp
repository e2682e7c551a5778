// The sampler, transcribed from run.c (softmax, random_u32/f32, sample_mult, sample_topp, sample;
// sample_argmax gives run.c's result through a restructured scan). Every float operation happens in the
// same order and precision as in run.c so that seeded runs print the same text; do not "simplify" the
// arithmetic.
#include "llamacl/sampler.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "llamacl/vector_expf.hpp"

namespace llamacl {

void softmax(std::span<float> x) {
    if (x.empty()) return;
    // find max value (for numerical stability)
    float max_val = x[0];
    for (std::size_t i = 1; i < x.size(); i++) {
        if (x[i] > max_val) max_val = x[i];
    }
    // exp and sum (expf's own bits, four at a time: vector_expf.hpp; the sum in order)
    for (float& v : x) v -= max_val;
    expf_each(x.data(), static_cast<int>(x.size()));
    float sum = 0.0f;
    for (const float v : x) sum += v;
    // normalize
    for (std::size_t i = 0; i < x.size(); i++) x[i] /= sum;
}

std::uint32_t random_u32(std::uint64_t& state) {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return static_cast<std::uint32_t>((state * 0x2545F4914F6CDD1Dull) >> 32);
}

float random_f32(std::uint64_t& state) {
    // 24 random bits fit a float's mantissa exactly.
    return static_cast<float>(random_u32(state) >> 8) / 16777216.0f;
}

int sample_argmax(std::span<const float> values) {
    // run.c keeps a running (max_i, max_p) from index 0 and moves on strictly greater values. That is
    // the first index holding the largest value, with two consequences kept here: a NaN never takes the
    // lead, and a NaN at index 0 keeps it (nothing compares greater). The scan keeps kLanes running
    // (max, index) pairs, lane l seeing the indices congruent to l: each lane that moves holds the first
    // largest of its indices, so the first largest overall is the lanes' largest, ties to the lowest
    // index (a lane that never moves stays at -inf and loses; if all do, values[0] is -inf and the answer
    // is 0). The lanes are 16 independent chains of compares that the CPU overlaps (GCC keeps them
    // scalar), where run.c's single chain waits on each compare in turn, over every token's logits in
    // greedy decoding.
    if (std::isnan(values[0])) return 0;
    constexpr std::size_t kLanes = 16;
    std::array<float, kLanes> best;
    std::array<std::size_t, kLanes> at;
    for (std::size_t l = 0; l < kLanes; ++l) {
        best[l] = -INFINITY;
        at[l] = l;
    }
    const std::size_t n = values.size();
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        for (std::size_t l = 0; l < kLanes; ++l) {
            const bool greater = values[i + l] > best[l];
            best[l] = greater ? values[i + l] : best[l];
            at[l] = greater ? i + l : at[l];
        }
    }
    float max_p = -INFINITY;
    std::size_t max_i = 0;
    for (std::size_t l = 0; l < kLanes; ++l) {
        if (best[l] > max_p || (best[l] == max_p && at[l] < max_i)) {
            max_p = best[l];
            max_i = at[l];
        }
    }
    for (; i < n; ++i) {  // the tail, after every lane's indices
        if (values[i] > max_p) {
            max_p = values[i];
            max_i = i;
        }
    }
    return static_cast<int>(max_i);
}

namespace {

// Samples from probabilities (they must sum to 1); coin is in [0, 1).
int sample_mult(std::span<const float> probabilities, float coin) {
    float cdf = 0.0f;
    for (std::size_t i = 0; i < probabilities.size(); i++) {
        cdf += probabilities[i];
        if (coin < cdf) return static_cast<int>(i);
    }
    return static_cast<int>(probabilities.size()) - 1;  // in case of rounding errors
}

}  // namespace

Sampler::Sampler(int vocab_size, float temperature, float topp, std::uint64_t seed)
    : vocab_size_(vocab_size), temperature_(temperature), topp_(topp), rng_state_(seed) {
    if (vocab_size < 1) throw std::invalid_argument("Sampler: vocab_size must be positive");
    // Top-p keeps at most every token as a candidate; allocate once, not per token.
    probindex_.resize(static_cast<std::size_t>(vocab_size));
}

int Sampler::sample_topp(std::span<const float> probabilities, float coin) {
    // Top-p sampling (or "nucleus sampling") samples from the smallest set of tokens whose
    // cumulative probability exceeds topp, so very unlikely tokens are never picked.
    const int n = static_cast<int>(probabilities.size());

    // Sorting all n probabilities is slow; tokens below this cutoff can never be part of the
    // nucleus, so drop them before sorting. (n - 1 converts to float, as in run.c.)
    int n0 = 0;
    const float cutoff = (1.0f - topp_) / static_cast<float>(n - 1);
    for (int i = 0; i < n; i++) {
        if (probabilities[static_cast<std::size_t>(i)] >= cutoff) {
            probindex_[static_cast<std::size_t>(n0)] = {probabilities[static_cast<std::size_t>(i)], i};
            n0++;
        }
    }
    if (n0 == 0) {
        // Only possible for a near-uniform distribution with topp < 1/n, for NaN probabilities,
        // or n == 1; run.c would then read probindex[-1]. The most probable token belongs to
        // every nucleus, so return it.
        return sample_argmax(probabilities);
    }
    // Descending by probability. run.c uses glibc's qsort, a stable merge sort: equal
    // probabilities keep index order, which std::stable_sort reproduces exactly.
    std::stable_sort(probindex_.begin(), probindex_.begin() + n0,
                     [](const ProbIndex& a, const ProbIndex& b) { return a.prob > b.prob; });

    // truncate the list where cumulative probability exceeds topp
    float cumulative_prob = 0.0f;
    int last_idx = n0 - 1;  // in case of rounding errors consider all elements
    for (int i = 0; i < n0; i++) {
        cumulative_prob += probindex_[static_cast<std::size_t>(i)].prob;
        if (cumulative_prob > topp_) {
            last_idx = i;
            break;  // we've exceeded topp by including last_idx
        }
    }

    // sample from the truncated list
    const float r = coin * cumulative_prob;
    float cdf = 0.0f;
    for (int i = 0; i <= last_idx; i++) {
        cdf += probindex_[static_cast<std::size_t>(i)].prob;
        if (r < cdf) return probindex_[static_cast<std::size_t>(i)].index;
    }
    return probindex_[static_cast<std::size_t>(last_idx)].index;  // in case of rounding errors
}

int Sampler::sample(std::span<float> logits) {
    if (logits.size() != static_cast<std::size_t>(vocab_size_))
        throw std::invalid_argument("Sampler::sample: got " + std::to_string(logits.size()) +
                                    " logits for a vocabulary of " + std::to_string(vocab_size_));
    if (temperature_ == 0.0f) {
        // greedy argmax sampling: take the token with the highest probability
        return sample_argmax(logits);
    }
    // A temperature so small that the largest logit divided by it is no longer finite would leave run.c's
    // softmax computing inf - inf (NaN probabilities, a garbage token); the distribution's limit there is
    // the argmax, so that is the token (the coin is still drawn, as for any temperature above 0). Logits
    // that are NaN or infinite themselves (a broken model) take run.c's path, and its token.
    const int best = sample_argmax(logits);
    const float largest = logits[static_cast<std::size_t>(best)];
    if (std::isfinite(largest) && !std::isfinite(largest / temperature_)) {
        random_f32(rng_state_);
        return best;
    }
    // apply the temperature to the logits
    for (float& logit : logits) logit /= temperature_;
    // apply softmax to the logits to get the probabilities for next token
    softmax(logits);
    // flip a (float) coin (this is our source of entropy for sampling)
    const float coin = random_f32(rng_state_);
    // we sample from this distribution to get the next token
    if (topp_ <= 0 || topp_ >= 1) {
        // simply sample from the predicted probability distribution
        return sample_mult(logits, coin);
    }
    // top-p (nucleus) sampling, clamping the least likely tokens to zero
    return sample_topp(logits, coin);
}

}  // namespace llamacl
