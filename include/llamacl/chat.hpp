#pragma once
// run.c's chat mode (-m chat): turns rendered in the Llama 2 chat schema (run.c's) or Llama 3's, each
// prompt forced through the model, the assistant's reply sampled until its stop (EOS; Llama 3's end of
// turn), one KV cache for the whole conversation.
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llamacl/forward.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/tokenizer.hpp"

namespace llamacl {

// How turns become tokens: Llama 2's [INST] schema (run.c's), or Llama 3's headers and end-of-turn tokens.
enum class ChatTemplate { llama2, llama3 };
std::optional<ChatTemplate> parse_chat_template(std::string_view name);  // "llama2", "llama3"
// A GGUF file's tokenizer.chat_template by its markers (not a Jinja engine): Llama 3's headers, else Llama 2.
ChatTemplate detect_chat_template(std::string_view jinja);

struct ChatMessage {
    std::string role, content;
};
// Llama 3's template as llama.cpp writes it: BOS where `first`, each message as
// <|start_header_id|>ROLE<|end_header_id|>\n\nTEXT<|eot_id|> (TEXT trimmed of surrounding whitespace),
// then the assistant's header opened. Control tokens go in by id; texts never match them.
std::vector<int> llama3_prompt(const Tokenizer& tokenizer, std::span<const ChatMessage> messages, bool first);

struct ChatOptions {
    ChatTemplate chat_template = ChatTemplate::llama2;
    std::optional<std::string> system_prompt;  // -y; absent: read from `in` after a guide
    std::optional<std::string> user_prompt;    // -i, the first turn's; absent: read from `in`
    int steps = 0;                             // positions of the whole conversation (effective_steps)
    int seq_len = 0, vocab_size = 0;           // the model's, for the prompts' checks
};

struct ChatStats {
    int positions = 0;  // forward passes run, one per position of the conversation
    int turns = 0;      // user turns
};

// Writes exactly run.c's chat() output to `out`, reading the prompts that options leave out from `in` a
// line at a time (newline stripped, ended at a NUL; a line longer than the conversation's positions x the
// tokenizer's max_token_length bytes, which no prompt it can hold is, or than 4 MiB, is an Error).
// Differences from run.c: the end of `in` ends the conversation (run.c repeats its last prompt) once -i's
// turn is answered; a turn's prompt longer than the context is an Error, and the first turn's must fit -n
// too (as generate's prompt must).
ChatStats chat(Forward& model, const Tokenizer& tokenizer, Sampler& sampler, const ChatOptions& options,
               std::FILE* in, std::FILE* out);

// chat()'s check of the first turn, where -y and -i give it whole: so that a caller can refuse it before
// anything is printed. Nothing to check otherwise (the turn is read from `in`).
void check_given_first_turn(const Tokenizer& tokenizer, const ChatOptions& options);

}  // namespace llamacl
