#pragma once
// run.c's generation loop: feed the prompt, then sample; stop at BOS or after `steps` positions.
#include <cstdio>
#include <string>
#include <vector>

#include "llamacl/forward.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/tokenizer.hpp"

namespace llamacl {

// Encodes the prompt as run.c does (BOS, no EOS) and checks it fits: an error naming -n or seq_len
// when it does not, or when a token is outside the model's vocabulary (a tokenizer larger than the
// model's), so that nothing is printed for a prompt that cannot be generated.
std::vector<int> encode_prompt(const Tokenizer& tokenizer, const std::string& prompt, int steps, int seq_len,
                               int vocab_size);

// run.c's rule: 0 or more than seq_len means seq_len.
int effective_steps(int steps, int seq_len);

struct GenerateStats {
    int positions = 0;           // forward passes run
    double tokens_per_s = 0.0;   // run.c's "achieved tok/s" (timed from the second position, or with a
                                 // greedy decoder from the first: it may return positions in batches)
};

// Flushes `out`; empty when everything written to it arrived, else "cannot write the output: REASON" (a
// full disk, an I/O error: run.c ignores them, we do not).
std::string output_failure(std::FILE* out);

// Writes exactly the bytes run.c prints to `out` (pieces, then a newline), and stops with an Error at
// the first write that fails.
GenerateStats generate(Forward& model, const Tokenizer& tokenizer, Sampler& sampler,
                       const std::vector<int>& prompt_tokens, int steps, std::FILE* out);

}  // namespace llamacl
