#include "llamacl/generate.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "llamacl/error.hpp"
#include "llamacl/number_text.hpp"

namespace llamacl {

namespace {
void write_piece(std::string_view piece, std::FILE* out) {
    if (!piece.empty()) std::fwrite(piece.data(), 1, piece.size(), out);
    flush_or_throw(out);
}
}  // namespace

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

std::span<float> require_finite_logits(std::span<float> logits, int pos) {
    const auto bad = std::find_if(logits.begin(), logits.end(), [](float l) { return !std::isfinite(l); });
    if (bad != logits.end()) throw NonFiniteLogits(pos, static_cast<std::size_t>(bad - logits.begin()), *bad);
    return logits;
}

std::span<float> run_forced(Forward& model, std::span<const int> tokens, int first, const LogitsObserver& each) {
    if (!each) return require_finite_logits(model.prefill(tokens, first), first + static_cast<int>(tokens.size()) - 1);
    return model.prefill(tokens, first,
                         [&](int pos, std::span<float> logits) { each(pos, require_finite_logits(logits, pos)); });
}

bool ends(std::span<const int> stops, int token) { return std::find(stops.begin(), stops.end(), token) != stops.end(); }

bool decode_until(Forward& model, const Tokenizer& tokenizer, Sampler& sampler, PieceWriter& writer, int token,
                  int next, int& pos, std::span<const int> stops, int steps, std::FILE* out) {
    while (!ends(stops, next)) {
        write_piece(writer.push(tokenizer.decode(token, next), false), out);
        if (pos >= steps) return false;
        token = next;
        next = sampler.sample(require_finite_logits(model.forward(token, pos), pos));
        ++pos;
    }
    return true;
}

std::string GenerateStats::describe_rates() const {
    return "prompt: " + counted(prompt_tokens, "token") + ", " + number_text("%.2f", prompt_tokens_per_s) +
           " tok/s; generation: " + counted(positions - prompt_tokens, "token") + ", " +
           number_text("%.2f", tokens_per_s) + " tok/s";
}

GenerateStats generate(Forward& model, const Tokenizer& tokenizer, Sampler& sampler,
                       const std::vector<int>& prompt_tokens, int steps, std::FILE* out) {
    using clock = std::chrono::steady_clock;
    const int n = static_cast<int>(prompt_tokens.size());
    int pos = 0, untimed = 0;
    GenerateStats stats;
    stats.prompt_tokens = n;
    // The prompt's forced positions through the model's prefill, timed on their own.
    const auto prefill = [&](std::span<const int> tokens) {
        const clock::time_point begin = clock::now();
        const std::span<float> logits = run_forced(model, tokens, 0);
        const double seconds = std::chrono::duration<double>(clock::now() - begin).count();
        stats.prompt_tokens_per_s = seconds > 0 ? static_cast<double>(tokens.size()) / seconds : 0.0;
        return logits;
    };
    clock::time_point start{};
    PieceWriter writer(tokenizer.byte_level());  // the prompt is echoed, then sampled tokens follow
    const std::span<const int> stops = tokenizer.generation_stops();
    // Greedy decoding by the backend itself where it can (the same tokens: run.c's argmax rule), which lets
    // it run ahead of this loop; it may hand positions over a batch at a time, the first call waiting for a
    // whole batch, so with one the clock runs from its start and every position it runs counts. The
    // prompt but its last token is prefilled first; decoding starts at the last.
    if (GreedyDecoder* greedy = sampler.temperature() == 0.0f ? model.greedy_decoder() : nullptr) {
        const std::span<const int> prompt(prompt_tokens);
        if (n > 1) prefill(prompt.first(static_cast<std::size_t>(n - 1)));
        start = clock::now();
        untimed = n - 1;
        greedy->start(n - 1, prompt.subspan(static_cast<std::size_t>(n - 1)), steps);
        for (int token = prompt_tokens.at(0); pos < steps;) {
            const bool in_prompt = pos < n - 1;
            const int next = in_prompt ? prompt_tokens[static_cast<std::size_t>(pos) + 1] : greedy->next(pos);
            ++pos;
            if (ends(stops, next)) break;  // (run.c: the model ends a sequence by starting a new one)
            write_piece(writer.push(tokenizer.decode(token, next), in_prompt), out);
            token = next;
        }
    } else {
        const std::span<float> logits = prefill(prompt_tokens);
        start = clock::now();  // the prompt's positions are not timed (run.c skips its warming-up first pass)
        untimed = pos = n;
        bool ended = false;    // a prompt's BOS ends the sequence as a sampled one does
        for (int i = 1; i < n && !ended; ++i) {
            ended = ends(stops, prompt_tokens[i]);
            if (!ended) write_piece(writer.push(tokenizer.decode(prompt_tokens[i - 1], prompt_tokens[i]), true), out);
        }
        if (!ended)
            decode_until(model, tokenizer, sampler, writer, prompt_tokens.back(), sampler.sample(logits), pos, stops,
                         steps, out);
    }
    std::fputc('\n', out);
    flush_or_throw(out);
    stats.positions = pos;
    if (pos > untimed) {
        const double seconds = std::chrono::duration<double>(clock::now() - start).count();
        stats.tokens_per_s = seconds > 0 ? (pos - untimed) / seconds : 0.0;
    }
    return stats;
}

}  // namespace llamacl
