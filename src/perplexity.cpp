#include "llamacl/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "llamacl/generate.hpp"

namespace llamacl {

double token_nll(std::span<const float> logits, int target) {
    // log-softmax around the largest logit, so that exp cannot overflow
    double max = logits[0];
    for (float l : logits) max = std::max(max, static_cast<double>(l));
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
    return max + std::log(sum) - static_cast<double>(logits[static_cast<std::size_t>(target)]);
}

PerplexityResult perplexity(Forward& model, std::span<const int> tokens, PerplexityWindows w,
                            const PerplexityProgress& progress) {
    const long long n = static_cast<long long>(tokens.size()) - 1;
    if (n < 1) throw std::invalid_argument("perplexity: no text token to score");
    if (w.context < 1 || w.stride < 1 || w.stride > w.context)
        throw std::invalid_argument("perplexity: windows need 1 <= stride <= context");
    PerplexityResult r;
    double total = 0.0;
    std::vector<int> window;
    for (long long s = 1;; s += w.stride) {
        const long long last = std::min(n, s + w.context - 1);  // the last text token this window predicts
        window.assign(1, tokens[0]);
        window.insert(window.end(), tokens.begin() + s, tokens.begin() + last);
        // Position p predicts text token s + p; those up to r.scored were scored by an earlier window.
        run_forced(model, window, 0, [&](int p, std::span<float> logits) {
            const long long target = s + p;
            if (target > r.scored) total += token_nll(logits, tokens[static_cast<std::size_t>(target)]);
        });
        r.positions += static_cast<long long>(window.size());
        r.scored = last;
        r.windows++;
        r.mean_nll = total / static_cast<double>(r.scored);
        r.perplexity = std::exp(r.mean_nll);
        if (progress) progress(r);
        if (last == n) return r;
    }
}

}  // namespace llamacl
