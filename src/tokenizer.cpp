// The llama2.c tokenizer, transcribed from run.c (build_tokenizer, encode, decode, safe_printf)
// with the file format validated, since run.c trusts tokenizer.bin completely.
#include "llamacl/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>
#include <system_error>
#include <tuple>

#include "llamacl/bpe_tokenizer.hpp"
#include "llamacl/error.hpp"
#include "llamacl/gguf_file.hpp"

namespace llamacl {

namespace {

// No real tokenizer has a piece anywhere near this long (Llama 2's longest is 48 bytes); a larger
// header value means the file is not a tokenizer.bin.
constexpr std::int32_t kMaxPlausibleTokenLength = 1 << 16;
// Nor anywhere near this many entries (Llama 3 has 128,256): the most read beyond the model's vocabulary,
// so that a large file of empty entries (8 bytes each, 16 bytes of tables each) is refused, not loaded.
constexpr std::size_t kMaxPlausibleEntries = std::size_t{1} << 20;
// The remedies of a file cut short, and of one that is no tokenizer.bin or a corrupt one.
constexpr const char* kCutShort = "; the file is cut short: download or export it again";
constexpr const char* kNotTheTokenizer =
    "; use the model's own tokenizer.bin (llama2.c's, or its tokenizer.py's export)";

// A tokenizer whose size is not the model's vocabulary is another model's: its ids name other pieces.
// run.c reads the first vocab_size entries of a larger one, which --allow-vocab-mismatch allows too.
Error vocab_mismatch(const std::string& path, int entries, int vocab_size) {
    return Error(path + ": the tokenizer has " + std::to_string(entries) + " entries but the model's vocabulary is " +
                 std::to_string(vocab_size) + " tokens; pass the model's own tokenizer with -z" +
                 (entries > vocab_size ? ", or --allow-vocab-mismatch to run with this one as run.c does" : ""));
}

// run.c's byte_pieces: byte i as a one-character C string at [2*i], NUL-terminated at [2*i+1].
constexpr std::array<char, 512> make_byte_pieces() {
    std::array<char, 512> pieces{};
    for (int i = 0; i < 256; i++) {
        pieces[2 * i] = static_cast<char>(i);
        pieces[2 * i + 1] = '\0';
    }
    return pieces;
}
constexpr std::array<char, 512> kBytePieces = make_byte_pieces();

// "Nothing to print" as a view with a non-null data pointer: callers pass views straight to fwrite,
// whose buffer argument must not be null even for zero bytes.
constexpr std::string_view kNothing = "";

// The C locale's isspace/isxdigit, spelled out so a global setlocale() elsewhere cannot change them.
bool c_isspace(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool c_isprint(unsigned char c) { return c >= 0x20 && c <= 0x7E; }
int c_hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Emulates glibc's sscanf(piece, "<0x%02hhX>", &byte) == 1 on a C string (`s` holds no NUL):
// the literal "<0x" must match, then %02hhX skips whitespace, takes an optional sign, an optional
// "0x" prefix and hex digits, all within a field width of 2 characters (the skipped whitespace does
// not count). The trailing '>' does not affect the return value, since the conversion has already
// been counted by then. Returns the byte, or -1 when sscanf would not return 1.
int scan_byte_piece(std::string_view s) {
    if (s.size() < 3 || s[0] != '<' || s[1] != '0' || s[2] != 'x') return -1;
    std::size_t pos = 3;
    auto at = [&](std::size_t i) -> int {  // the character at i, or -1 (EOF) past the end
        return i < s.size() ? static_cast<unsigned char>(s[i]) : -1;
    };
    while (at(pos) != -1 && c_isspace(static_cast<unsigned char>(at(pos)))) pos++;
    int width = 2;
    int c = at(pos);
    if (c == -1) return -1;  // input failure before the conversion
    bool negative = false;
    bool have_digit = false;  // glibc's "more than just a sign was read"
    unsigned value = 0;
    if (c == '-' || c == '+') {
        negative = c == '-';
        width--;
        c = at(++pos);
    }
    if (width != 0 && c == '0') {
        width--;
        have_digit = true;  // the '0' is part of the number even if an "x" follows
        c = at(++pos);
        if (width != 0 && (c == 'x' || c == 'X')) {
            width--;
            c = at(++pos);
        }
    }
    while (c != -1 && width != 0) {
        const int digit = c_hexval(static_cast<unsigned char>(c));
        if (digit < 0) break;
        value = value * 16 + static_cast<unsigned>(digit);
        have_digit = true;
        width--;
        c = at(++pos);
    }
    if (!have_digit) return -1;
    // strtoul semantics: a minus sign negates in unsigned arithmetic; %hhX keeps the low 8 bits.
    if (negative) value = 0u - value;
    return static_cast<int>(value & 0xFFu);
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path, int min_vocab) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (status.type() == fs::file_type::not_found) throw Error(path + ": tokenizer file not found");
    if (ec) throw Error(path + ": cannot open tokenizer file (" + ec.message() + ")");
    if (fs::is_directory(status)) throw Error(path + ": is a directory, not a tokenizer file");
    // A FIFO or device would block or never end; a tokenizer is always a plain file.
    if (!fs::is_regular_file(status))
        throw Error(path + ": not a regular file; pass a llama2.c tokenizer.bin");
    const std::uintmax_t file_size = fs::file_size(path, ec);
    if (ec) throw Error(path + ": cannot read tokenizer file (" + ec.message() + ")");
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in)  // libstdc++'s filebuf leaves open(2)'s errno (Permission denied, ...)
        throw Error(path + ": cannot open tokenizer file for reading" +
                    (errno ? std::string(" (") + std::strerror(errno) + ")" : std::string()));

    // /proc and /sys files call themselves regular with a size of 0 and still have content to read.
    if (file_size == 0 && in.peek() != std::ifstream::traits_type::eof())
        throw Error(path + ": a file that reports no size (a /proc or /sys file?), not a llama2.c tokenizer; pass a "
                           "tokenizer.bin");

    // Every length field is checked against the bytes still unread before anything is allocated
    // from it, so a corrupt or hostile file cannot make us allocate more than its own size.
    std::uintmax_t remaining = file_size;
    auto read_exact = [&](void* dst, std::size_t n) {
        if (n > remaining) return false;
        in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
        if (static_cast<std::size_t>(in.gcount()) != n) return false;
        remaining -= n;
        return true;
    };

    Tokenizer t;
    t.path_ = path;
    std::int32_t max_len = 0;
    if (!read_exact(&max_len, sizeof max_len))
        throw Error(path + ": truncated tokenizer file (no max_token_length header)");
    if (max_len <= 0 || max_len > kMaxPlausibleTokenLength)
        throw Error(path + ": invalid max_token_length " + std::to_string(max_len) +
                    " (not a llama2.c tokenizer.bin?)");
    t.max_token_length_ = max_len;

    t.offsets_.push_back(0);
    std::string piece;
    const std::size_t max_entries = std::max(kMaxPlausibleEntries, static_cast<std::size_t>(std::max(min_vocab, 0)));
    while (remaining > 0) {
        const std::size_t entry = t.offsets_.size() - 1;
        if (entry == max_entries)
            throw Error(path + ": more than " + std::to_string(max_entries) +
                        " tokenizer entries (a llama2.c tokenizer.bin has one per token of the model's vocabulary" +
                        (min_vocab > 0 ? ", here " + std::to_string(min_vocab) : std::string()) +
                        "); use the tokenizer the model was trained with");
        float score = 0.0f;
        std::int32_t len = 0;
        if (!read_exact(&score, sizeof score) || !read_exact(&len, sizeof len))
            throw Error(path + ": truncated tokenizer entry " + std::to_string(entry) + kCutShort);
        if (len < 0 || len > max_len)
            throw Error(path + ": tokenizer entry " + std::to_string(entry) + " has length " +
                        std::to_string(len) + " (must be 0.." + std::to_string(max_len) + ")" + kNotTheTokenizer);
        if (static_cast<std::uintmax_t>(len) > remaining)
            throw Error(path + ": truncated tokenizer entry " + std::to_string(entry) + " (length " +
                        std::to_string(len) + " but only " + std::to_string(remaining) +
                        " bytes left)" + kCutShort);
        piece.resize(static_cast<std::size_t>(len));
        if (!read_exact(piece.data(), piece.size()))
            throw Error(path + ": truncated tokenizer entry " + std::to_string(entry) + kCutShort);
        // run.c stores pieces as C strings: everything from the first NUL on is invisible to it.
        t.bytes_.append(piece.data(), std::strlen(piece.c_str()));
        t.offsets_.push_back(t.bytes_.size());
        t.scores_.push_back(score);
    }

    const int n = t.size();
    if (n == 0) throw Error(path + ": tokenizer file has no entries" + kNotTheTokenizer);
    if (n < min_vocab) throw vocab_mismatch(path, n, min_vocab);

    // run.c sorts with qsort(compare_tokens = strcmp). glibc's qsort is a stable merge sort, so
    // equal pieces stay in id order; std::stable_sort gives the identical permutation.
    // string_view comparison is memcmp-like (unsigned bytes, shorter prefix first), i.e. strcmp.
    t.sorted_ids_.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; i++) t.sorted_ids_[static_cast<std::size_t>(i)] = i;
    std::stable_sort(t.sorted_ids_.begin(), t.sorted_ids_.end(),
                     [&t](int a, int b) { return t.piece_unchecked(a) < t.piece_unchecked(b); });
    return t;
}

Tokenizer Tokenizer::load_flag(const std::string& path, bool given, int vocab_size, VocabFit fit) {
    try {
        Tokenizer t = load(path, vocab_size);
        if (fit == VocabFit::exact && t.size() != vocab_size) throw vocab_mismatch(path, t.size(), vocab_size);
        return t;
    } catch (const Error& e) {
        if (given) throw;
        throw Error(std::string(e.what()) + " (the default tokenizer, as no -z was given: pass the model's tokenizer "
                    "with -z PATH)", e.exit_code());
    }
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file, int min_vocab) {
    const std::string& path = file.path();
    const auto bad = [&](const std::string& what) { return Error(path + ": " + what); };
    const std::optional<std::string_view> model = file.string("tokenizer.ggml.model");
    if (!model) throw bad("tokenizer.ggml.model is missing: the file has no vocabulary; pass a tokenizer with -z");
    const GgufValue* tokens = file.array("tokenizer.ggml.tokens", GgufType::string);
    if (!tokens || tokens->count == 0) throw bad("tokenizer.ggml.tokens is missing or empty");
    if (tokens->count > kMaxPlausibleEntries)
        throw bad("tokenizer.ggml.tokens holds " + std::to_string(tokens->count) + " tokens, more than any vocabulary");
    const auto n = static_cast<std::size_t>(tokens->count);
    if (n < static_cast<std::size_t>(std::max(min_vocab, 0)))
        throw bad("the vocabulary has " + std::to_string(n) + " tokens but the model's embedding has " +
                  std::to_string(min_vocab) + " rows");
    std::vector<TokenType> types(n, TokenType::normal);
    if (const GgufValue* t = file.array("tokenizer.ggml.token_type", GgufType::i32)) {
        if (t->count != n) throw bad("tokenizer.ggml.token_type does not have one entry per token");
        for (std::size_t i = 0; i < n; ++i) {
            std::int32_t type = 0;
            std::memcpy(&type, t->data + i * sizeof type, sizeof type);
            types[i] = static_cast<TokenType>(type);
        }
    }
    Tokenizer v;
    v.path_ = path;
    const auto id_of = [&](const char* key, int fallback) {
        const std::optional<std::int64_t> id = file.integer(key);
        if (!id) return fallback;
        if (*id < 0 || static_cast<std::uint64_t>(*id) >= n)
            throw bad(std::string(key) + " is " + std::to_string(*id) + ", outside the vocabulary of " +
                      std::to_string(n) + " tokens");
        return static_cast<int>(*id);
    };
    if (*model == "llama") {
        const GgufValue* scores = file.array("tokenizer.ggml.scores", GgufType::f32);
        if (!scores || scores->count != n) throw bad("tokenizer.ggml.scores does not have one score per token");
        // SentencePiece writes a space as U+2581; run.c's tokenizer.bin has the space itself.
        constexpr std::string_view kSpace = "\xE2\x96\x81";
        v.offsets_.push_back(0);
        for (std::size_t i = 0; i < n; ++i) {
            std::string_view text = tokens->string_at(i);
            text = text.substr(0, std::min(text.size(), text.find('\0')));
            for (std::size_t at = 0; at < text.size();) {
                if (text.compare(at, kSpace.size(), kSpace) == 0) {
                    v.bytes_ += ' ';
                    at += kSpace.size();
                } else {
                    v.bytes_ += text[at++];
                }
            }
            v.max_token_length_ = std::max(v.max_token_length_, static_cast<int>(v.bytes_.size() - v.offsets_.back()));
            v.offsets_.push_back(v.bytes_.size());
            float score = 0.0f;
            std::memcpy(&score, scores->data + i * sizeof score, sizeof score);
            v.scores_.push_back(score);
        }
        v.sorted_ids_.resize(n);
        for (std::size_t i = 0; i < n; i++) v.sorted_ids_[i] = static_cast<int>(i);
        std::stable_sort(v.sorted_ids_.begin(), v.sorted_ids_.end(),
                         [&v](int a, int b) { return v.piece_unchecked(a) < v.piece_unchecked(b); });
    } else if (*model == "gpt2") {
        const std::optional<std::string_view> pre_name = file.string("tokenizer.ggml.pre");
        const std::optional<BpePre> pre = parse_bpe_pre(pre_name.value_or("gpt-2"));
        if (!pre)
            throw bad("tokenizer.ggml.pre is \"" + printable(*pre_name) +
                      "\"; llama-cl knows the \"llama-bpe\" and \"gpt-2\" pre-tokenizers");
        const GgufValue* merges = file.array("tokenizer.ggml.merges", GgufType::string);
        if (!merges) throw bad("tokenizer.ggml.merges is missing: a BPE vocabulary needs its merges");
        std::vector<std::string> texts(n);
        for (std::size_t i = 0; i < n; ++i) texts[i] = tokens->string_at(i);
        std::vector<std::string_view> merge_list(static_cast<std::size_t>(merges->count));
        for (std::size_t i = 0; i < merge_list.size(); ++i) merge_list[i] = merges->string_at(i);
        v.bpe_ = std::make_shared<const BpeTokenizer>(std::move(texts), types, merge_list, *pre, path);
        v.offsets_.assign(n + 1, 0);  // size() counts the BPE vocabulary's tokens
        for (std::size_t i = 0; i < n; ++i)
            v.max_token_length_ = std::max(v.max_token_length_, static_cast<int>(v.bpe_->bytes(static_cast<int>(i)).size()));
        v.max_token_length_ = std::max(v.max_token_length_, 1);
    } else {
        throw bad("tokenizer.ggml.model is \"" + printable(*model) +
                  "\"; llama-cl reads SentencePiece (\"llama\") and byte-level BPE (\"gpt2\") vocabularies");
    }
    v.control_.resize(n);
    for (std::size_t i = 0; i < n; ++i) v.control_[i] = types[i] == TokenType::control;
    v.bos_ = id_of("tokenizer.ggml.bos_token_id", std::min<int>(1, static_cast<int>(n) - 1));
    v.eos_ = id_of("tokenizer.ggml.eos_token_id", std::min<int>(2, static_cast<int>(n) - 1));
    v.generation_stops_ = {v.eos_};
    const int eot = id_of("tokenizer.ggml.eot_token_id", v.special("<|eot_id|>"));
    if (eot >= 0 && eot != v.eos_) v.generation_stops_.push_back(eot);
    v.reply_stops_ = v.generation_stops_;
    v.chat_template_ = file.string("tokenizer.chat_template").value_or("");
    return v;
}

Tokenizer Tokenizer::for_model(const std::string& model_path, const std::string& path, bool given, int vocab_size,
                               VocabFit fit) {
    std::error_code ec;
    if (!given && std::filesystem::is_regular_file(model_path, ec)) {  // (a FIFO is never opened to look)
        std::ifstream in(model_path, std::ios::binary);
        std::array<std::byte, 4> head{};
        if (in.read(reinterpret_cast<char*>(head.data()), head.size()) && GgufFile::has_magic(head))
            return from_gguf(GgufFile::open(model_path), vocab_size);
    }
    return load_flag(path, given, vocab_size, fit);
}

void Tokenizer::check_id(int id) const {
    if (id < 0 || id >= size())
        throw Error(path_ + ": token id " + std::to_string(id) + " is out of range (tokenizer has " +
                    std::to_string(size()) + " entries)");
}

std::string_view Tokenizer::piece(int id) const {
    check_id(id);
    return bpe_ ? bpe_->bytes(id) : piece_unchecked(id);
}

int Tokenizer::special(std::string_view text) const {
    if (bpe_) {
        const int id = bpe_->find(text);
        return id >= 0 && bpe_->type(id) != TokenType::normal ? id : -1;
    }
    const int id = lookup(text);
    return id >= 0 && !control_.empty() && control_[static_cast<std::size_t>(id)] ? id : -1;
}

float Tokenizer::score(int id) const {
    check_id(id);
    return scores_[static_cast<std::size_t>(id)];
}

int Tokenizer::lookup(std::string_view str) const {
    // glibc's bsearch, step for step: with duplicate pieces, which id is found depends on the
    // probe sequence, so a lower_bound would not always agree with run.c.
    std::size_t l = 0, u = sorted_ids_.size();
    while (l < u) {
        const std::size_t idx = (l + u) / 2;
        const int id = sorted_ids_[idx];
        const int cmp = str.compare(piece_unchecked(id));
        if (cmp < 0) {
            u = idx;
        } else if (cmp > 0) {
            l = idx + 1;
        } else {
            return id;
        }
    }
    return -1;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool bos, bool eos, bool special) const {
    // BOS and EOS are ids 1 and 2 by convention; a tokenizer without them cannot encode them (run.c
    // would read past a short vocabulary when it decodes or merges them).
    for (const auto& [wanted, id, name] : {std::tuple{bos, bos_, "BOS"}, std::tuple{eos, eos_, "EOS"}})
        if (wanted && id >= size())
            throw Error(path_ + ": " + name + " (token id " + std::to_string(id) +
                        ") is out of range: the tokenizer has only " + std::to_string(size()) + " entries");
    std::vector<int> tokens;
    if (bos) tokens.push_back(bos_);
    if (bpe_) {
        const std::vector<int> ids = bpe_->encode(text, special);
        tokens.insert(tokens.end(), ids.begin(), ids.end());
        if (eos) tokens.push_back(eos_);
        return tokens;
    }

    // run.c receives a C string: the text ends at its first NUL.
    text = text.substr(0, std::min(text.size(), text.find('\0')));
    tokens.reserve(text.size() + 3);

    // Add the dummy prefix, like sentencepiece's add_dummy_prefix: the text is treated as if it
    // started with a space, so "Hello" at the start encodes like " Hello" mid-sentence.
    if (!text.empty()) {
        const int dummy_prefix = lookup(" ");
        if (dummy_prefix == -1)
            throw Error(path_ + ": tokenizer has no \" \" piece, which encoding needs as the dummy prefix" +
                        kNotTheTokenizer);
        tokens.push_back(dummy_prefix);
    }

    // Split the text into UTF-8 code points: a code point is a lead byte followed by continuation
    // bytes (10xxxxxx), at most 4 bytes in all. Each becomes its piece's id, or one byte-fallback
    // token per byte (the first 3 ids are <unk>, <s>, </s>, so byte b is id b + 3).
    std::string buffer;
    for (std::size_t i = 0; i < text.size(); i++) {
        const auto c = static_cast<unsigned char>(text[i]);
        // Anything that is not a continuation byte starts a new code point.
        if ((c & 0xC0) != 0x80) buffer.clear();
        buffer.push_back(static_cast<char>(c));
        // run.c looks at the next byte of the C string, which is NUL after the last one.
        const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
        if ((next & 0xC0) == 0x80 && buffer.size() < 4) continue;

        const int id = lookup(buffer);
        if (id != -1) {
            tokens.push_back(id);
        } else {
            for (const char b : buffer) {
                const int byte_id = static_cast<unsigned char>(b) + 3;
                // run.c would index past its vocabulary in the merge loop below.
                if (byte_id >= size())
                    throw Error(path_ + ": tokenizer has " + std::to_string(size()) +
                                " entries, too few for byte-fallback token " + std::to_string(byte_id));
                tokens.push_back(byte_id);
            }
        }
        buffer.clear();
    }

    // Merge the best consecutive pair each iteration, according to the scores in vocab_scores, as
    // run.c does: the pair with the highest score, the leftmost among equal scores, and only pairs
    // scoring above run.c's starting best of -1e10 (so never a NaN). run.c rescans every pair after
    // each merge, which is quadratic in the prompt's length (minutes for a long prompt); this keeps
    // the candidate pairs in a heap instead, ordered by (score, position), and makes the same merges
    // in the same order in O(n log n). A merge keeps the left token's node, so node indices stay in
    // text order and "leftmost" is "smallest left node index".
    // Node indices are 32-bit (every caller's text is far below 2^32 bytes): a long text's nodes and
    // heap are most of the memory its encoding takes.
    constexpr float kRunCStartScore = -1e10f;
    using Index = std::uint32_t;
    struct Node {
        int token;
        Index prev, next;  // neighbours in the current token list; kNone at the ends
        bool alive;
    };
    constexpr Index kNone = std::numeric_limits<Index>::max();
    if (tokens.size() >= kNone) throw Error(path_ + ": a text of more than 2^32 bytes cannot be encoded at once");
    struct Candidate {
        float score;
        Index left, right;  // the pair's nodes
        int left_token, right_token, merged;
    };
    // The heap's top is the best candidate: highest score, then smallest left index.
    const auto worse = [](const Candidate& a, const Candidate& b) {
        if (a.score != b.score) return a.score < b.score;
        return a.left > b.left;
    };
    const Index n = static_cast<Index>(tokens.size());
    std::vector<Node> nodes(n);
    for (Index i = 0; i < n; i++) nodes[i] = {tokens[i], i == 0 ? kNone : i - 1, i + 1 < n ? i + 1 : kNone, true};
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(worse);
    std::string merged;
    const auto consider = [&](Index left) {
        if (left == kNone || nodes[left].next == kNone) return;
        const Index right = nodes[left].next;
        // Check whether we can merge the pair (tokens[left], tokens[right]).
        merged.assign(piece_unchecked(nodes[left].token));
        merged.append(piece_unchecked(nodes[right].token));
        const int id = lookup(merged);
        if (id == -1) return;
        const float score = scores_[static_cast<std::size_t>(id)];
        if (!(score > kRunCStartScore)) return;
        heap.push({score, left, right, nodes[left].token, nodes[right].token, id});
    };
    for (Index i = 0; i + 1 < n; i++) consider(i);
    while (!heap.empty()) {
        const Candidate c = heap.top();
        heap.pop();
        // Skip pairs that earlier merges changed: a pair's score depends only on its two tokens, so a
        // candidate whose nodes are still adjacent and still hold the same tokens is exactly current.
        Node& left = nodes[c.left];
        if (!left.alive || left.next != c.right || left.token != c.left_token ||
            nodes[c.right].token != c.right_token)
            continue;
        // Merge the pair into the left node and delete the right one.
        Node& right = nodes[c.right];
        left.token = c.merged;
        left.next = right.next;
        if (right.next != kNone) nodes[right.next].prev = c.left;
        right.alive = false;
        consider(left.prev);
        consider(c.left);
    }
    std::vector<int> result;
    result.reserve(tokens.size() + 1);
    for (Index i = n == 0 ? kNone : 0; i != kNone; i = nodes[i].next) result.push_back(nodes[i].token);
    tokens.swap(result);

    if (eos) tokens.push_back(eos_);
    return tokens;
}

std::string_view Tokenizer::decode(int prev_token, int token) const {
    if (bpe_) return bpe_->bytes(token);
    std::string_view piece = this->piece(token);
    if (!control_.empty() && control_[static_cast<std::size_t>(token)]) return kNothing;
    // After BOS, sentencepiece strips the leading whitespace of the first piece (the dummy prefix).
    if (prev_token == bos_ && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    // Raw-byte tokens look like "<0x01>": they decode to that single byte.
    const int byte = scan_byte_piece(piece);
    if (byte >= 0) {
        // run.c returns the C string at byte_pieces[2*byte]; for byte 0 that string is empty.
        return std::string_view(kBytePieces.data() + 2 * byte, byte == 0 ? 0 : 1);
    }
    return piece;
}

std::string_view printable_piece(std::string_view piece) {
    // printf("%s") stops at the first NUL.
    piece = piece.substr(0, std::min(piece.size(), piece.find('\0')));
    if (piece.empty()) return kNothing;
    if (piece.size() == 1) {
        const auto byte = static_cast<unsigned char>(piece[0]);
        // Drop raw control bytes and lone high bytes, as run.c does: they would garble the terminal.
        if (!(c_isprint(byte) || c_isspace(byte))) return kNothing;
    }
    return piece;
}

std::string_view PieceWriter::push_characters(std::string_view piece) {
    pending_.append(piece);
    complete_.clear();
    const auto* bytes = reinterpret_cast<const unsigned char*>(pending_.data());
    std::size_t at = 0;
    while (at < pending_.size()) {
        const unsigned char lead = bytes[at];
        if (lead < 0x80) {
            // A lone control byte is dropped, as run.c's safe_printf drops it.
            if (c_isprint(lead) || c_isspace(lead) || piece.size() > 1) complete_ += static_cast<char>(lead);
            ++at;
            continue;
        }
        // RFC 3629's ranges: no overlong forms, no surrogates, nothing above U+10FFFF.
        std::size_t need = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (lead >= 0xC2 && lead <= 0xDF) need = 2;
        else if (lead >= 0xE0 && lead <= 0xEF) need = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
        else if (lead >= 0xF0 && lead <= 0xF4) need = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
        std::size_t got = need > 0 ? 1 : 0;
        while (got > 0 && got < need && at + got < pending_.size()) {
            const unsigned char c = bytes[at + got];
            if (c < (got == 1 ? lo : 0x80) || c > (got == 1 ? hi : 0xBF)) break;
            ++got;
        }
        if (got == need && need > 0) {
            complete_.append(pending_, at, need);
            at += need;
        } else if (got > 0 && at + got == pending_.size()) {
            break;  // unfinished: the next piece may complete it
        } else {
            ++at;  // cannot start or continue a character
        }
    }
    pending_.erase(0, at);
    return complete_.empty() ? kNothing : std::string_view(complete_);
}

std::string_view PieceWriter::push(std::string_view piece, bool from_prompt) {
    if (whole_characters_) return push_characters(piece);
    if (!from_prompt || piece.size() != 1 || static_cast<unsigned char>(piece[0]) < 0x80) {
        pending_.clear();  // an unfinished character is dropped, as run.c drops its bytes
        return printable_piece(piece);
    }
    const auto byte = static_cast<unsigned char>(piece[0]);
    if (!pending_.empty() && byte >= lo_ && byte <= hi_) {
        pending_ += static_cast<char>(byte);
        lo_ = 0x80;
        hi_ = 0xBF;
        if (pending_.size() < need_) return kNothing;
        need_ = 0;
        complete_.swap(pending_);  // complete_ keeps the bytes alive for the caller until the next push
        pending_.clear();
        return complete_;
    }
    pending_.clear();
    // A lead byte sets the length and the range of the second byte (RFC 3629: no overlong forms,
    // no surrogates, nothing above U+10FFFF); anything else cannot start a character and is dropped.
    lo_ = 0x80;
    hi_ = 0xBF;
    if (byte >= 0xC2 && byte <= 0xDF) need_ = 2;
    else if (byte >= 0xE0 && byte <= 0xEF) {
        need_ = 3;
        if (byte == 0xE0) lo_ = 0xA0;
        if (byte == 0xED) hi_ = 0x9F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
        need_ = 4;
        if (byte == 0xF0) lo_ = 0x90;
        if (byte == 0xF4) hi_ = 0x8F;
    } else {
        return kNothing;
    }
    pending_ += static_cast<char>(byte);
    return kNothing;
}

}  // namespace llamacl

