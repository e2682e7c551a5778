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

void write_piece(std::string_view piece, std::FILE* out) {
    if (!piece.empty()) std::fwrite(piece.data(), 1, piece.size(), out);
    flush_or_throw(out);
}
}  // namespace

// Generating into the void after a failed write would only waste the device's time.
void flush_or_throw(std::FILE* out) {
    if (std::string failure = output_failure(out); !failure.empty()) throw Error(std::move(failure));
}

std::string output_failure(std::FILE* out) {
    errno = 0;
    if (std::fflush(out) == 0 && !std::ferror(out)) return {};
    // errno is the failed call's when the flush failed; an earlier failed write may have left none.
    return std::string("cannot write the output: ") + (errno ? std::strerror(errno) : "I/O error");
}

int effective_steps(int steps, int seq_len) { return steps == 0 || steps > seq_len ? seq_len : steps; }

std::vector<int> encode_text(const Tokenizer& tokenizer, const std::string& text, int vocab_size,
                             const std::string& what) {
    std::vector<int> tokens = tokenizer.encode(text, /*bos=*/true, /*eos=*/false);
    for (int id : tokens)
        if (id >= vocab_size)
            throw Error(tokenizer.path() + ": " + what + " encodes to token " + std::to_string(id) +
                        ", outside the model's vocabulary of " + std::to_string(vocab_size) +
                        "; use the tokenizer the model was trained with");
    return tokens;
}

std::vector<int> encode_prompt(const Tokenizer& tokenizer, const std::string& prompt, int steps, int seq_len,
                               int vocab_size, const std::string& source) {
    std::vector<int> tokens = encode_text(tokenizer, prompt, vocab_size, "the prompt");
    const int n = static_cast<int>(tokens.size());
    if (n > seq_len)
        throw Error(source + ": the prompt is " + std::to_string(n) + " tokens but the model's context (seq_len) is " +
                    std::to_string(seq_len) + "; shorten the prompt");
    if (n > steps)
        throw usage_error(source + ": the prompt is " + std::to_string(n) + " tokens but -n allows " +
                          std::to_string(steps) + " positions; raise -n to at least " + std::to_string(n) +
                          " (0 means the whole context, " + std::to_string(seq_len) + ")");
    return tokens;
}

std::span<float> run_forced(Forward& model, std::span<const int> tokens, int first, const LogitsObserver& each) {
    std::span<float> logits;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const int pos = first + static_cast<int>(i);
        logits = model.forward(tokens[i], pos);
        if (each) each(pos, logits);
    }
    return logits;
}

bool decode_until(Forward& model, const Tokenizer& tokenizer, Sampler& sampler, int token, int next, int& pos,
                  int stop, int steps, std::FILE* out) {
    while (next != stop) {
        write_piece(printable_piece(tokenizer.decode(token, next)), out);
        if (pos >= steps) return false;
        token = next;
        next = sampler.sample(model.forward(token, pos++));
    }
    return true;
}

GenerateStats generate(Forward& model, const Tokenizer& tokenizer, Sampler& sampler,
                       const std::vector<int>& prompt_tokens, int steps, std::FILE* out) {
    using clock = std::chrono::steady_clock;
    const int n = static_cast<int>(prompt_tokens.size());
    int pos = 0, untimed = 0;
    clock::time_point start{};
    PieceWriter writer;  // the prompt is echoed, then sampled tokens follow
    // Greedy decoding by the backend itself where it can (the same tokens: run.c's argmax rule), which lets
    // it run ahead of this loop; it may hand positions over a batch at a time, the first call waiting for a
    // whole batch, so with one the clock runs from the start and every position counts.
    if (GreedyDecoder* greedy = sampler.temperature() == 0.0f ? model.greedy_decoder() : nullptr) {
        start = clock::now();
        greedy->start(0, prompt_tokens, steps);
        for (int token = prompt_tokens.at(0); pos < steps;) {
            const bool in_prompt = pos < n - 1;
            const int next = greedy->next(pos++);
            if (next == kBos) break;  // the model ends a sequence by starting a new one
            write_piece(writer.push(tokenizer.decode(token, next), in_prompt), out);
            token = next;
        }
    } else {
        const std::span<float> logits = run_forced(model, prompt_tokens, 0);
        start = clock::now();  // the prompt's positions are not timed (run.c skips its warming-up first pass)
        untimed = pos = n;
        bool ended = false;    // a prompt's BOS ends the sequence as a sampled one does
        for (int i = 1; i < n && !ended; ++i) {
            ended = prompt_tokens[i] == kBos;
            if (!ended) write_piece(writer.push(tokenizer.decode(prompt_tokens[i - 1], prompt_tokens[i]), true), out);
        }
        if (!ended)
            decode_until(model, tokenizer, sampler, prompt_tokens.back(), sampler.sample(logits), pos, kBos, steps, out);
    }
    std::fputc('\n', out);
    flush_or_throw(out);
    GenerateStats stats;
    stats.positions = pos;
    if (pos > untimed) {
        const double seconds = std::chrono::duration<double>(clock::now() - start).count();
        stats.tokens_per_s = seconds > 0 ? (pos - untimed) / seconds : 0.0;
    }
    return stats;
}

}  // namespace llamacl
