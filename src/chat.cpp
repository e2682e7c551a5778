#include "llamacl/chat.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/generate.hpp"

namespace llamacl {

namespace {
void write(std::string_view text, std::FILE* out) {
    std::fwrite(text.data(), 1, text.size(), out);
    flush_or_throw(out);
}

// The longest line read, whatever the context: its encoding takes memory in proportion.
constexpr std::size_t kMaxLineBytes = std::size_t{4} << 20;

// A line's limit in bytes: no token is longer than the tokenizer's max_token_length, so a longer line
// needs more tokens than the conversation has positions.
struct LineLimit {
    std::size_t bytes;
    std::string why;
};
LineLimit line_limit(int steps, int max_token_length) {
    const std::size_t fits = static_cast<std::size_t>(steps) * static_cast<std::size_t>(max_token_length);
    if (fits > kMaxLineBytes) return {kMaxLineBytes, "is more than llama-cl reads as one line"};
    return {fits, "cannot fit the conversation's " + std::to_string(steps) + " positions (-n, at most seq_len) in tokens"};
}

// run.c's read_stdin without its buffer: prints the guide, then reads a line and strips its newline;
// nullopt at the end of the input. run.c's line is a C string: it ends at a NUL byte. A line past the
// limit is refused as soon as it gets there, so that an input without newlines (a device, a binary
// file) is not read whole.
std::optional<std::string> read_line(const char* guide, std::FILE* in, std::FILE* out, const LineLimit& limit,
                                     const std::string& what) {
    write(guide, out);
    std::string line;
    for (int c; (c = std::fgetc(in)) != EOF && c != '\n';) {
        if (line.size() == limit.bytes)
            throw Error(what + ": a line of stdin longer than " + std::to_string(limit.bytes) + " bytes " + limit.why +
                        "; give a shorter prompt");
        line += static_cast<char>(c);
    }
    if (std::ferror(in)) throw Error(what + ": cannot read stdin (" + std::strerror(errno) + ")");
    if (line.empty() && std::feof(in)) return std::nullopt;
    line.resize(std::strlen(line.c_str()));
    return line;
}

// The Llama 2 chat schema: the system prompt, when there is one, goes into the first turn.
std::string render(const std::string& system_prompt, const std::string& user_prompt, bool first) {
    if (first && !system_prompt.empty())
        return "[INST] <<SYS>>\n" + system_prompt + "\n<</SYS>>\n\n" + user_prompt + " [/INST]";
    return "[INST] " + user_prompt + " [/INST]";
}
// Turn `turn`'s tokens. Before the first turn nothing is generated yet, and its prompt must fit -n as
// generate's does; a later one may run into -n's end, where the conversation ends as it does anywhere else.
std::vector<int> encode_turn(const Tokenizer& tokenizer, const ChatOptions& o, const std::string& system_prompt,
                             const std::string& user, int turn) {
    const bool first = turn == 1;
    return encode_prompt(tokenizer, render(system_prompt, user, first), first ? o.steps : o.seq_len, o.seq_len,
                         o.vocab_size, "chat turn " + std::to_string(turn));
}


std::string trimmed(std::string_view text) {
    constexpr std::string_view kSpace = " \t\n\r\v\f";
    const std::size_t first = text.find_first_not_of(kSpace);
    if (first == std::string_view::npos) return {};
    return std::string(text.substr(first, text.find_last_not_of(kSpace) - first + 1));
}

// The control token `text` of a Llama 3 vocabulary.
int control(const Tokenizer& tokenizer, const char* text) {
    const int id = tokenizer.special(text);
    if (id < 0)
        throw Error(tokenizer.path() + ": the vocabulary has no " + text +
                    " token, which the Llama 3 chat template needs; use --chat-template llama2");
    return id;
}

void append(std::vector<int>& ids, const std::vector<int>& more) { ids.insert(ids.end(), more.begin(), more.end()); }

// <|start_header_id|>ROLE<|end_header_id|>\n\n, then TEXT<|eot_id|> when given.
void append_turn(std::vector<int>& ids, const Tokenizer& tokenizer, const char* role, const std::string* text) {
    ids.push_back(control(tokenizer, "<|start_header_id|>"));
    append(ids, tokenizer.encode(role, false, false));
    ids.push_back(control(tokenizer, "<|end_header_id|>"));
    append(ids, tokenizer.encode("\n\n" + (text ? trimmed(*text) : std::string()), false, false));
    if (text) ids.push_back(control(tokenizer, "<|eot_id|>"));
}

// Llama 3's chat as run.c's chat runs Llama 2's (the same guides and flags): each turn's prompt forced
// through the model, the reply sampled until end of turn or EOS; that stop opens the next turn's prompt.
ChatStats chat_llama3(Forward& model, const Tokenizer& tokenizer, Sampler& sampler, const ChatOptions& o,
                      std::FILE* in, std::FILE* out) {
    ChatStats stats;
    int& pos = stats.positions;
    const LineLimit max_line = line_limit(o.steps, tokenizer.max_token_length());
    std::optional<std::string> system_prompt;
    int stop = -1;  // the stop that ended the last reply, not yet run
    PieceWriter writer(tokenizer.byte_level());
    while (pos < o.steps) {
        const bool first = stats.turns == 0;
        if (first) {
            system_prompt = o.system_prompt ? o.system_prompt
                                            : read_line("Enter system prompt (optional): ", in, out, max_line,
                                                        "the system prompt");
            if (!system_prompt && !o.user_prompt) break;
            if (system_prompt && system_prompt->empty()) system_prompt.reset();
        }
        const std::optional<std::string> user =
            first && o.user_prompt ? o.user_prompt
                                   : read_line("User: ", in, out, max_line, "chat turn " + std::to_string(stats.turns + 1));
        if (!user) break;
        ++stats.turns;
        std::vector<ChatMessage> messages;
        if (first && system_prompt) messages.push_back({"system", *system_prompt});
        messages.push_back({"user", *user});
        std::vector<int> prompt = first ? std::vector<int>{} : std::vector<int>{stop};
        append(prompt, llama3_prompt(tokenizer, messages, first));
        if (static_cast<int>(prompt.size()) > o.seq_len - pos)
            throw Error("chat turn " + std::to_string(stats.turns) + ": the turn is " + std::to_string(prompt.size()) +
                        " tokens, more than the " + std::to_string(o.seq_len - pos) +
                        " positions left in the model's context; shorten it");
        write("Assistant: ", out);
        const std::span<const int> forced =
            std::span(prompt).first(std::min<std::size_t>(prompt.size(), static_cast<std::size_t>(o.steps - pos)));
        const std::span<float> logits = run_forced(model, forced, pos);
        pos += static_cast<int>(forced.size());
        if (forced.size() < prompt.size()) break;
        int next = sampler.sample(logits);
        const std::span<const int> stops = tokenizer.reply_stops();
        const bool ended = decode_until(model, tokenizer, sampler, writer, prompt.back(), next, pos, stops, o.steps, out);
        write("\n", out);
        if (!ended) break;
        stop = control(tokenizer, "<|eot_id|>");
    }
    write("\n", out);
    return stats;
}

}  // namespace

void check_given_first_turn(const Tokenizer& tokenizer, const ChatOptions& o) {
    if (o.chat_template == ChatTemplate::llama2 && o.system_prompt && o.user_prompt)
        encode_turn(tokenizer, o, *o.system_prompt, *o.user_prompt, 1);
}

std::optional<ChatTemplate> parse_chat_template(std::string_view name) {
    if (name == "llama2") return ChatTemplate::llama2;
    if (name == "llama3") return ChatTemplate::llama3;
    return std::nullopt;
}

ChatTemplate detect_chat_template(std::string_view jinja) {
    return jinja.find("<|start_header_id|>") != std::string_view::npos ? ChatTemplate::llama3 : ChatTemplate::llama2;
}

std::vector<int> llama3_prompt(const Tokenizer& tokenizer, std::span<const ChatMessage> messages, bool first) {
    std::vector<int> ids;
    if (first) ids.push_back(tokenizer.bos());
    for (const ChatMessage& m : messages) append_turn(ids, tokenizer, m.role.c_str(), &m.content);
    append_turn(ids, tokenizer, "assistant", nullptr);
    return ids;
}

ChatStats chat(Forward& model, const Tokenizer& tokenizer, Sampler& sampler, const ChatOptions& o, std::FILE* in,
               std::FILE* out) {
    if (o.chat_template == ChatTemplate::llama3) return chat_llama3(model, tokenizer, sampler, o, in, out);
    const int eos = tokenizer.eos();
    PieceWriter writer(tokenizer.byte_level());
    ChatStats stats;
    int& pos = stats.positions;
    std::string system_prompt;
    const LineLimit max_line = line_limit(o.steps, tokenizer.max_token_length());
    while (pos < o.steps) {
        const bool first = stats.turns == 0;
        if (first) {
            std::optional<std::string> text =
                o.system_prompt ? o.system_prompt
                                : read_line("Enter system prompt (optional): ", in, out, max_line, "the system prompt");
            // The input's end ends the conversation, but -i's turn is already given: it is answered
            // without a system prompt.
            if (!text && !o.user_prompt) break;
            system_prompt = text.value_or("");
        }
        const std::optional<std::string> user =
            first && o.user_prompt ? o.user_prompt
                                   : read_line("User: ", in, out, max_line, "chat turn " + std::to_string(stats.turns + 1));
        if (!user) break;
        ++stats.turns;
        const std::vector<int> prompt = encode_turn(tokenizer, o, system_prompt, *user, stats.turns);
        write("Assistant: ", out);

        // run.c samples at every position, the prompt's too (the draws advance the RNG), and prints a
        // newline whenever the token it samples is EOS; the prompt's last position samples the reply's first.
        const std::span<const int> forced =
            std::span(prompt).first(std::min<std::size_t>(prompt.size(), static_cast<std::size_t>(o.steps - pos)));
        int next = 0;
        run_forced(model, forced, pos, [&](int, std::span<float> logits) {
            next = sampler.sample(logits);
            if (next == eos) write("\n", out);
        });
        pos += static_cast<int>(forced.size());
        if (forced.size() < prompt.size()) break;
        if (next != eos) {
            if (!decode_until(model, tokenizer, sampler, writer, prompt.back(), next, pos, std::span(&eos, 1), o.steps,
                              out))
                break;
            write("\n", out);
        }
        // run.c's quirk: the position after EOS runs EOS itself, and prints the token it samples (another
        // EOS a newline) before the next turn's prompt begins with BOS.
        if (pos >= o.steps) break;
        next = sampler.sample(require_finite_logits(model.forward(eos, pos), pos));
        ++pos;
        write(next == eos ? std::string_view("\n") : writer.push(tokenizer.decode(eos, next), false), out);
    }
    write("\n", out);
    return stats;
}

}  // namespace llamacl
