#pragma once
// Byte-level BPE, the tokenizer of GPT-2 and the Llama 3 family, as llama.cpp runs it for a GGUF
// vocabulary whose tokenizer.ggml.model is "gpt2": the text split by the pre-tokenizer's regular
// expression (PCRE2, UTF and Unicode-property mode), each piece's bytes mapped to GPT-2's printable
// characters, then merged pair by pair in the order of the merges list (lowest rank first).
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llamacl {

// The pre-tokenizers tokenizer.ggml.pre may name. (An absent name is llama.cpp's "default", a set of four
// expressions that is neither of these.)
enum class BpePre {
    gpt2,    // "gpt-2": GPT-2's expression
    llama3,  // "llama-bpe" (or "llama3", "llama-v3"): Llama 3's, and a piece that is a whole token is that token
};
// nullopt for any other name.
std::optional<BpePre> parse_bpe_pre(std::string_view name);

// GGUF's token types (tokenizer.ggml.token_type).
enum class TokenType : std::int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

class BpeTokenizer {
public:
    // tokens[i] is token i's text in GPT-2's byte mapping; types[i] its type; merges "A B" pairs by rank.
    // Throws llamacl::Error("<name>: ...") for a merge that is not two tokens separated by one space or
    // that names an unknown token, for a normal token whose text is not the byte mapping's (a byte token's
    // not "<0xHH>"), for two tokens with one text, and for tokens and types of different counts. An empty
    // text becomes "[EMPTY_<id>]", as in llama.cpp.
    BpeTokenizer(std::vector<std::string> tokens, std::vector<TokenType> types,
                 const std::vector<std::string_view>& merges, BpePre pre, const std::string& name);

    // The ids of `text` (no BOS or EOS). Control and unknown tokens' texts match only with
    // `parse_special` (llama.cpp's parse_special); user-defined tokens' texts always match.
    // Invalid UTF-8 and NUL bytes give ids as llama.cpp's do, never an error; a text over 512 MiB throws
    // llamacl::Error.
    std::vector<int> encode(std::string_view text, bool parse_special) const;

    // The bytes token `id` stands for: its text through the inverse byte mapping; empty for control,
    // unknown and unused tokens (they never print as text, as llama.cpp's token_to_piece without
    // `special`); a user-defined token's text as it is; a byte token's byte. Throws llamacl::Error for an
    // id outside [0, size()).
    std::string_view bytes(int id) const;

    int size() const { return static_cast<int>(texts_.size()); }
    TokenType type(int id) const { return types_[static_cast<std::size_t>(id)]; }
    // The id of the token whose text is `text` exactly (any type), or -1.
    int find(std::string_view text) const;

private:
    struct Pattern;  // the compiled pre-tokenizer expression (PCRE2)
    struct Merge {
        int rank;
        int result;  // the id of the two texts joined, or -1 when no token has it
    };
    struct Workspace;
    // Transparent hashing, so a string_view finds a std::string key without a copy.
    struct TextHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
    };

    // Token `id`'s bytes, as bytes() returns them; throws for a text its type cannot have.
    std::string decoded(int id, const std::string& name) const;
    void read_merges(const std::vector<std::string_view>& merges, const std::string& name);
    void encode_text(std::string_view text, Workspace& work, std::vector<int>& out) const;
    void encode_piece(std::string_view piece, Workspace& work, std::vector<int>& out) const;

    std::vector<std::string> texts_;  // as in the file, but for empty ones
    std::vector<std::string> bytes_;  // decoded
    std::vector<TokenType> types_;
    std::unordered_map<std::string, int, TextHash, std::equal_to<>> ids_;
    std::array<int, 256> byte_ids_{};  // the id of each byte's character in the mapping, or -1
    // Merges by the two token ids of the pair ((left << 32) | right).
    std::unordered_map<std::uint64_t, Merge> merges_;
    // Control, unknown and user-defined tokens, longest text first: the order they split the text in.
    std::vector<int> specials_;
    std::shared_ptr<const Pattern> pattern_;
    BpePre pre_;
};

}  // namespace llamacl
