#pragma once
// The engine that generate, chat and perplexity drive: a prompt's forced tokens through one call (the
// point a prefill replaces), then run.c's loop of sampling, printing and feeding back one token a position.
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/forward.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/tokenizer.hpp"

namespace llamacl {

// Encodes `text` as run.c encodes a prompt (BOS, no EOS); an Error when a token is outside the model's
// vocabulary (a tokenizer larger than the model's), `what` naming the text in it.
std::vector<int> encode_text(const Tokenizer& tokenizer, const std::string& text, int vocab_size,
                             const std::string& what);

// Encodes the prompt as run.c does (BOS, no EOS) and checks it fits: an error naming -n or seq_len
// when it does not, or when a token is outside the model's vocabulary (a tokenizer larger than the
// model's), so that nothing is printed for a prompt that cannot be generated. `source` names where the
// prompt came from in the messages.
std::vector<int> encode_prompt(const Tokenizer& tokenizer, const std::string& prompt, int steps, int seq_len,
                               int vocab_size, const std::string& source = "-i");

// run.c's rule: 0 or more than seq_len means seq_len.
int effective_steps(int steps, int seq_len);

// `logits`, those of position `pos`, when all are finite; throws NonFiniteLogits otherwise.
std::span<float> require_finite_logits(std::span<float> logits, int pos);

// Runs `tokens` (at least one) at positions first, first + 1, ... through the model's prefill and returns
// the last position's logits, valid until the model's next call. `each`, when given, sees every
// position's logits in order. Every position whose logits it hands out passes require_finite_logits.
std::span<float> run_forced(Forward& model, std::span<const int> tokens, int first, const LogitsObserver& each = {});

// run.c's decoding loop after a prompt: `next` was sampled from the logits of position pos - 1, whose
// token was `token`. Until one of `stops` is sampled, prints next's piece through `writer` (as run.c's
// safe_printf does), and while pos < steps runs it at pos and samples the token after it. Returns whether a
// stop was sampled (it is neither printed nor run); pos is then the position after the last one run.
bool decode_until(Forward& model, const Tokenizer& tokenizer, Sampler& sampler, PieceWriter& writer, int token,
                  int next, int& pos, std::span<const int> stops, int steps, std::FILE* out);

struct GenerateStats {
    int positions = 0;           // forward passes run
    double tokens_per_s = 0.0;   // positions after the prompt's per second (with a one-token prompt run.c's
                                 // "achieved tok/s", timed from the second position; with a greedy decoder
                                 // from the first: it may return positions in batches)
    // The prompt's tokens, and its prefill's rate (with a greedy decoder over all but the last token, which
    // decoding runs).
    int prompt_tokens = 0;
    double prompt_tokens_per_s = 0.0;
    // "prompt: N tokens, X tok/s; generation: M tokens, Y tok/s" (-v), as llama.cpp reports them apart; the
    // counts are the same on every backend.
    std::string describe_rates() const;
};

// Writes exactly the bytes run.c prints to `out` (pieces, then a newline), and stops with an Error at
// the first write that fails.
GenerateStats generate(Forward& model, const Tokenizer& tokenizer, Sampler& sampler,
                       const std::vector<int>& prompt_tokens, int steps, std::FILE* out);

}  // namespace llamacl
