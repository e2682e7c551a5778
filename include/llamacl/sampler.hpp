#pragma once
// Token sampling exactly as llama2.c's run.c does it: greedy argmax, multinomial, or top-p
// (nucleus) sampling, driven by run.c's xorshift RNG, so a given seed picks the same tokens.
#include <cstdint>
#include <span>
#include <vector>

namespace llamacl {

// run.c's softmax, in place: subtract the max (first found, strict >) for numerical stability,
// expf and sum in index order in float, then divide. The CPU forward pass uses it for attention
// too, so its float operations must stay exactly these. An empty span is left alone.
void softmax(std::span<float> x);

// run.c's sample_argmax: the index of the largest value, the first on ties (strict >); a NaN never takes
// the lead, and a NaN at index 0 keeps it. values must not be empty.
int sample_argmax(std::span<const float> values);

// run.c's xorshift* RNG (https://en.wikipedia.org/wiki/Xorshift#xorshift*): advances `state`.
std::uint32_t random_u32(std::uint64_t& state);
// A float in [0, 1) from the top 24 bits of random_u32.
float random_f32(std::uint64_t& state);

class Sampler {
public:
    // run.c's build_sampler. The RNG state starts at `seed` as given (run.c's main replaces a seed
    // <= 0 by the time before this; that is the caller's job). topp <= 0 or >= 1 means plain
    // multinomial sampling. Throws std::invalid_argument when vocab_size < 1.
    Sampler(int vocab_size, float temperature, float topp, std::uint64_t seed);

    // Picks the next token from `logits` (vocab_size values), overwriting them with the
    // temperature-scaled probabilities as run.c does. Temperature 0 is argmax and draws no random
    // number. Throws std::invalid_argument when logits.size() != vocab_size.
    int sample(std::span<float> logits);

    int vocab_size() const { return vocab_size_; }
    float temperature() const { return temperature_; }
    float topp() const { return topp_; }
    std::uint64_t rng_state() const { return rng_state_; }

private:
    struct ProbIndex {  // a candidate for top-p sampling
        float prob;
        int index;
    };
    int sample_topp(std::span<const float> probabilities, float coin);

    int vocab_size_;
    float temperature_;
    float topp_;
    std::uint64_t rng_state_;
    std::vector<ProbIndex> probindex_;  // top-p scratch, vocab-sized, allocated once
};

}  // namespace llamacl
