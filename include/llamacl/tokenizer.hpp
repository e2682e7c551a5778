#pragma once
// A model's vocabulary: llama2.c's tokenizer.bin, or a GGUF file's (tokenizer.ggml.*). SentencePiece
// vocabularies (tokenizer.bin, and GGUF's "llama" model, its "\xE2\x96\x81" spaces read as spaces) run
// run.c's encode(), decode() and safe_printf() exactly, so prompts map to the same ids and output prints
// the same bytes; byte-level BPE vocabularies (GGUF's "gpt2") run bpe_tokenizer.hpp's.
//
// tokenizer.bin: int32 max_token_length, then entries until end of file, each
//   float32 score, int32 len, len bytes of piece.
// Token ids are entry indices. run.c keeps pieces as C strings, so a piece here is its bytes up to
// the first NUL.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llamacl {

class BpeTokenizer;
class GgufFile;

// How a llama2.c tokenizer must fit a model's vocabulary: entry for entry, or with entries to spare
// beyond the ids the model emits (run.c's rule, which --allow-vocab-mismatch keeps).
enum class VocabFit { exact, at_least };

class Tokenizer {
public:
    // Reads and validates `path`. Throws llamacl::Error("<path>: ...") when the file is missing,
    // unreadable, a directory, truncated, has a bad length field, holds no entries, or holds fewer
    // than `min_vocab` entries (the model's vocabulary: every id the model can emit needs a piece).
    static Tokenizer load(const std::string& path, int min_vocab);
    // load, for a command's -z, with `fit` to the model's `vocab_size` entries: where -z was not `given`,
    // `path` is run.c's default (./tokenizer.bin), and an error says so, which a user who did not know the
    // default learns from.
    static Tokenizer load_flag(const std::string& path, bool given, int vocab_size, VocabFit fit);
    // The vocabulary of a GGUF file (tokenizer.ggml.model "llama" or "gpt2"). Throws llamacl::Error naming
    // the file and the key for a missing or malformed vocabulary, another tokenizer model or pre-tokenizer,
    // special ids outside it, or fewer than `min_vocab` tokens.
    static Tokenizer from_gguf(const GgufFile& file, int min_vocab);
    // The vocabulary a command runs `model_path` with: -z's file where given, else the model's own when it
    // is a GGUF file, else run.c's default tokenizer.bin (load_flag).
    static Tokenizer for_model(const std::string& model_path, const std::string& path, bool given, int vocab_size,
                               VocabFit fit);

    // Number of entries in the file (may exceed the model's vocabulary).
    int size() const { return static_cast<int>(offsets_.size()) - 1; }
    int max_token_length() const { return max_token_length_; }
    const std::string& path() const { return path_; }
    int bos() const { return bos_; }  // run.c: 1
    int eos() const { return eos_; }  // run.c: 2
    // The ids that end generation: run.c's BOS (a model starts a new sequence); a GGUF vocabulary's EOS
    // and end-of-turn tokens.
    std::span<const int> generation_stops() const { return generation_stops_; }
    // The ids that end an assistant's reply in chat: run.c's EOS; a GGUF vocabulary's EOS and end of turn.
    std::span<const int> reply_stops() const { return reply_stops_; }
    bool byte_level() const { return bpe_ != nullptr; }
    const std::string& chat_template() const { return chat_template_; }  // GGUF's tokenizer.chat_template, or empty  // BPE: decode() gives bytes, characters across ids
    // The id of the control or user-defined token whose text is `text`, or -1 (chat templates insert them).
    int special(std::string_view text) const;

    // run.c's encode(): optional BOS (1), the dummy-prefix " " token when text is non-empty,
    // UTF-8 code points (byte fallback id = byte + 3 when a code point has no piece), then greedy
    // merges by best score, then optional EOS (2). Like run.c, text ends at its first NUL byte.
    // Throws llamacl::Error when the tokenizer has no " " piece (run.c would emit id -1), or when
    // a byte-fallback id, or BOS (1) or EOS (2) when asked for, is not a valid entry (run.c would
    // read out of bounds). Merging is O(n log n) in the text's length (run.c's loop is quadratic).
    // BPE vocabularies encode as llama.cpp does; `special` lets control tokens' texts match (parse_special).
    std::vector<int> encode(std::string_view text, bool bos, bool eos, bool special = false) const;

    // run.c's decode(): the piece for `token`, minus its leading space right after BOS (1);
    // "<0xXX>" pieces become the single raw byte. The view stays valid while the Tokenizer lives
    // (byte pieces point into static storage). Byte 0x00 decodes to an empty view, as run.c's
    // C string does. Throws llamacl::Error for ids outside [0, size()) (prev_token is only
    // compared with 1, never looked up).
    // GGUF vocabularies: control tokens decode to nothing; BPE tokens to their bytes.
    std::string_view decode(int prev_token, int token) const;

    // The raw piece of `id`. Throws llamacl::Error for ids outside [0, size()).
    std::string_view piece(int id) const;
    float score(int id) const;

private:
    Tokenizer() = default;
    std::string_view piece_unchecked(int id) const {
        return std::string_view(bytes_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
    }
    void check_id(int id) const;
    // run.c's str_lookup(): glibc bsearch over the strcmp-sorted vocabulary; -1 when absent.
    int lookup(std::string_view str) const;

    std::string path_;
    int max_token_length_ = 0;
    std::string bytes_;                 // all pieces back to back (each cut at its first NUL)
    std::vector<std::size_t> offsets_;  // piece i is bytes_[offsets_[i], offsets_[i+1])
    std::vector<float> scores_;
    std::vector<int> sorted_ids_;       // ids ordered by strcmp of their pieces, ties by id
    std::vector<bool> control_;         // GGUF: the ids that never print
    int bos_ = 1, eos_ = 2;
    std::string chat_template_;
    std::vector<int> generation_stops_{1}, reply_stops_{2};
    std::shared_ptr<const BpeTokenizer> bpe_;  // a byte-level BPE vocabulary, which then does the work
};

// run.c's safe_printf(), returning the bytes to write instead of printing them: nothing for an
// empty piece or for a lone byte that is neither printable nor whitespace in the C locale (every
// byte >= 0x80 among them); otherwise the piece up to its first NUL (printf("%s") semantics).
std::string_view printable_piece(std::string_view piece);

// What generation prints for each decoded piece: run.c's safe_printf with one deliberate difference.
// While the prompt is echoed, lone bytes >= 0x80 that together form one complete, valid UTF-8
// character (a character of the user's text that the tokenizer split into byte-fallback tokens) are
// written as that character, so "naïve" or an emoji survive; run.c drops them. Sampled tokens follow
// run.c exactly: a model emitting lone bytes (random weights do, often) prints what run.c prints, and
// stray or unfinished bytes are always dropped.
// With `whole_characters` (byte-level vocabularies, whose characters span ids), every piece's bytes are
// gathered into whole UTF-8 characters, printed once complete; bytes that cannot form one are dropped, as
// run.c drops lone bytes.
class PieceWriter {
public:
    explicit PieceWriter(bool whole_characters = false) : whole_characters_(whole_characters) {}
    // The bytes to write for the next piece (possibly none); `from_prompt` says whether the token was
    // forced by the prompt. The view is valid until the next call.
    std::string_view push(std::string_view piece, bool from_prompt);

private:
    std::string_view push_characters(std::string_view piece);

    bool whole_characters_;
    std::string pending_;   // the bytes so far of an unfinished UTF-8 character
    std::string complete_;  // the last character completed, returned by push()
    std::size_t need_ = 0;  // its total length
    unsigned char lo_ = 0x80, hi_ = 0xBF;  // the range the next continuation byte must fall in
};

}  // namespace llamacl
