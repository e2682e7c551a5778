#pragma once
// Scores a text by the model: the mean negative log-likelihood of each next token and its perplexity,
// over windows of the context that each start with BOS.
#include <functional>
#include <span>

#include "llamacl/forward.hpp"

namespace llamacl {

// tokens[0] is BOS and tokens[1..n] the text's. Window k runs BOS then the text from index
// s = 1 + k * stride for up to context - 1 tokens, its positions predicting text tokens s .. s + context - 1;
// it scores those that no earlier window scored, and the last window is the first that reaches token n.
// So every text token is scored exactly once: the first window's first one from BOS alone, a later
// window's after at least context - stride tokens of its window (stride in [1, context]).
struct PerplexityWindows {
    int context = 0, stride = 0;
};

struct PerplexityResult {
    long long scored = 0;    // text tokens scored (n)
    double mean_nll = 0.0;   // natural log, accumulated in double
    double perplexity = 0.0; // exp(mean_nll)
    int windows = 0;
    long long positions = 0; // forward passes run
};

// The negative log-likelihood of `target` under softmax(logits), computed in double.
double token_nll(std::span<const float> logits, int target);

// Called after each window with the result so far.
using PerplexityProgress = std::function<void(const PerplexityResult& so_far)>;

// Throws std::invalid_argument for fewer than two tokens or windows outside the rule above.
PerplexityResult perplexity(Forward& model, std::span<const int> tokens, PerplexityWindows windows,
                            const PerplexityProgress& progress = {});

}  // namespace llamacl
