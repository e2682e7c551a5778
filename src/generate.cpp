#include "llamacl/generate.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "llamacl/error.hpp"

namespace llamacl {

namespace {
constexpr int kBos = 1;

// Generating into the void after a failed write would only waste the device's time.
void flush_or_throw(std::FILE* out) {
    if (std::string failure = output_failure(out); !failure.empty()) throw Error(std::move(failure));
}
}  // namespace

std::string output_failure(std::FILE* out) {
    errno = 0;
    if (std::fflush(out) == 0 && !std::ferror(out)) return {};
    // errno is the failed call's when the flush failed; an earlier failed write may have left none.
    return std::string("cannot write the output: ") + (errno ? std::strerror(errno) : "I/O error");
}

int effective_steps(int steps, int seq_len) { return steps == 0 || steps > seq_len ? seq_len : steps; }

std::vector<int> encode_prompt(const Tokenizer& tokenizer, const std::string& prompt, int steps, int seq_len,
                               int vocab_size) {
    std::vector<int> tokens = tokenizer.encode(prompt, /*bos=*/true, /*eos=*/false);
    const int n = static_cast<int>(tokens.size());
    for (int id : tokens)
        if (id >= vocab_size)
            throw Error(tokenizer.path() + ": the prompt encodes to token " + std::to_string(id) +
                        ", outside the model's vocabulary of " + std::to_string(vocab_size) +
                        "; use the tokenizer the model was trained with");
    if (n > seq_len)
        throw Error("-i: the prompt is " + std::to_string(n) + " tokens but the model's context (seq_len) is " +
                    std::to_string(seq_len) + "; shorten the prompt");
    if (n > steps)
        throw usage_error("-i: the prompt is " + std::to_string(n) + " tokens but -n allows " +
                          std::to_string(steps) + " positions; raise -n to at least " + std::to_string(n) +
                          " (0 means the whole context, " + std::to_string(seq_len) + ")");
    return tokens;
}

GenerateStats generate(Forward& model, const Tokenizer& tokenizer, Sampler& sampler,
                       const std::vector<int>& prompt_tokens, int steps, std::FILE* out) {
    using clock = std::chrono::steady_clock;
    clock::time_point start{};
    PieceWriter writer;
    int token = prompt_tokens.at(0);
    int pos = 0;
    // Greedy decoding by the backend itself where it can (the same tokens: run.c's argmax rule), which lets
    // it run ahead of this loop.
    GreedyDecoder* greedy = sampler.temperature() == 0.0f ? model.greedy_decoder() : nullptr;
    // run.c's clock starts after the first position (its first pass pays for warming up). A greedy decoder
    // may hand positions over a batch at a time, the first call waiting for a whole batch, so with one the
    // clock runs from the start and every position counts.
    if (greedy) {
        start = clock::now();
        greedy->start(0, prompt_tokens, steps);
    }
    while (pos < steps) {
        // While inside the prompt the next token is forced; afterwards it is sampled.
        const bool in_prompt = pos < static_cast<int>(prompt_tokens.size()) - 1;
        int next;
        if (greedy) {
            next = greedy->next(pos);
        } else {
            std::span<float> logits = model.forward(token, pos);
            next = in_prompt ? prompt_tokens[pos + 1] : sampler.sample(logits);
        }
        pos++;
        if (next == kBos) break;  // the model ends a sequence by starting a new one
        const std::string_view piece = writer.push(tokenizer.decode(token, next), in_prompt);
        if (!piece.empty()) std::fwrite(piece.data(), 1, piece.size(), out);
        flush_or_throw(out);
        token = next;
        if (start == clock::time_point{}) start = clock::now();  // skip the first pass, as run.c does
    }
    std::fputc('\n', out);
    flush_or_throw(out);
    GenerateStats stats;
    stats.positions = pos;
    const int timed = greedy ? pos : pos - 1;
    if (timed > 0) {
        const double seconds = std::chrono::duration<double>(clock::now() - start).count();
        stats.tokens_per_s = seconds > 0 ? timed / seconds : 0.0;
    }
    return stats;
}

}  // namespace llamacl
