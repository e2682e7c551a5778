// Byte-level BPE as llama.cpp runs it: src/llama-vocab.cpp's tokenizer_st_partition (special tokens first)
// and llm_tokenizer_bpe_session (merges by rank), src/unicode.cpp's reading of the text and its
// pre-tokenizer, whose expressions PCRE2 runs here.
#include "llamacl/bpe_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>

#include "llamacl/error.hpp"

namespace llamacl {

namespace {

constexpr std::uint32_t kReplacement = 0xFFFD;
// The longest text encode() takes: as read (at most three bytes for each byte) it still numbers its bytes in
// an int, as the merging does.
constexpr std::size_t kMaxText = std::size_t{512} << 20;

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// GPT-2's bytes_to_unicode(): the printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves, the other 68, in byte order, for U+0100 onwards.
struct ByteMapping {
    std::array<std::string, 256> text;  // byte -> its character, in UTF-8
    std::array<int, 0x144> byte;        // code point -> the byte it stands for, or -1
};

ByteMapping make_byte_mapping() {
    ByteMapping mapping;
    mapping.byte.fill(-1);
    std::uint32_t next = 0x100;
    for (std::uint32_t b = 0; b < 256; b++) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const std::uint32_t cp = printable ? b : next++;
        append_utf8(mapping.text[b], cp);
        mapping.byte[cp] = static_cast<int>(b);
    }
    return mapping;
}

const ByteMapping& byte_mapping() {
    static const ByteMapping mapping = make_byte_mapping();
    return mapping;
}

// A token text in the byte mapping back to its bytes; nullopt when it holds anything else.
std::optional<std::string> unmap(std::string_view text) {
    const ByteMapping& mapping = byte_mapping();
    std::string bytes;
    for (std::size_t i = 0; i < text.size();) {
        const auto c0 = static_cast<unsigned char>(text[i]);
        std::uint32_t cp = c0;
        if (c0 >= 0x80) {  // the mapping's characters are at most two bytes long
            if ((c0 & 0xE0) != 0xC0 || i + 1 >= text.size()) return std::nullopt;
            const auto c1 = static_cast<unsigned char>(text[i + 1]);
            if ((c1 & 0xC0) != 0x80) return std::nullopt;
            cp = ((c0 & 0x1Fu) << 6) | (c1 & 0x3Fu);
            if (cp < 0x80) return std::nullopt;  // an overlong form
        }
        i += c0 >= 0x80 ? 2 : 1;
        if (cp >= mapping.byte.size() || mapping.byte[cp] < 0) return std::nullopt;
        bytes += static_cast<char>(mapping.byte[cp]);
    }
    return bytes;
}

// The byte of a byte token's text "<0xHH>"; nullopt for any other text.
std::optional<char> byte_token(std::string_view text) {
    const auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return std::nullopt;
    const int high = hex(text[3]), low = hex(text[4]);
    if (high < 0 || low < 0) return std::nullopt;
    return static_cast<char>(high * 16 + low);
}

// One code point of `text` at `pos`, read as llama.cpp's unicode_cpt_from_utf8 reads it: the lead byte gives
// the length and the continuation bytes are checked, but overlong forms and surrogates pass. Anything else is
// U+FFFD for one byte, as in unicode_cpts_from_utf8; so is a code point past U+10FFFF (llama.cpp throws).
std::uint32_t next_code_point(std::string_view text, std::size_t& pos) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned lead = byte(pos);
    const std::size_t length = lead < 0x80   ? 1
                               : lead < 0xC0 ? 0  // a continuation byte
                               : lead < 0xE0 ? 2
                               : lead < 0xF0 ? 3
                               : lead < 0xF8 ? 4
                                             : 0;
    if (length == 0 || pos + length > text.size()) {
        pos++;
        return kReplacement;
    }
    std::uint32_t cp = length == 1 ? lead : lead & (0x7Fu >> length);
    for (std::size_t i = 1; i < length; i++) {
        if ((byte(pos + i) & 0xC0) != 0x80) {
            pos++;
            return kReplacement;
        }
        cp = (cp << 6) | (byte(pos + i) & 0x3Fu);
    }
    pos += length;
    return cp > 0x10FFFF ? kReplacement : cp;
}

// `text` as llama.cpp's pre-tokenizer sees it, in `clean`: each code point as next_code_point() reads it,
// written back in UTF-8. `subject` is the same with each surrogate, which PCRE2 refuses in UTF-8, written as
// U+FFFD: as long, and of the same class to both expressions.
void clean_text(std::string_view text, std::string& clean, std::string& subject) {
    clean.clear();
    subject.clear();
    for (std::size_t pos = 0; pos < text.size();) {
        const std::uint32_t cp = next_code_point(text, pos);
        append_utf8(clean, cp);
        append_utf8(subject, cp >= 0xD800 && cp <= 0xDFFF ? kReplacement : cp);
    }
}

// llama.cpp's expressions (the Llama 3 one with its case-insensitive group spelled out as llama.cpp does), with
// \s written as Unicode's White_Space set, llama.cpp's \s: PCRE2's \s also takes U+180E, white space before
// Unicode 6.3.
std::string expression(BpePre pre) {
    const std::string white = "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
                              "\\x{202F}\\x{205F}\\x{3000}";
    const std::string space = "[" + white + "]";
    const std::string other = "[^" + white + "\\p{L}\\p{N}]";
    const std::string spaces = space + "+(?![^" + white + "])|" + space + "+";
    if (pre == BpePre::llama3) {
        return "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
               "| ?" + other + "+[\\r\\n]*|" + space + "*[\\r\\n]+|" + spaces;
    }
    return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" + other + "+|" + spaces;
}

std::string pcre2_message(int code) {
    std::array<PCRE2_UCHAR, 256> buffer{};
    pcre2_get_error_message(code, buffer.data(), buffer.size());
    return reinterpret_cast<const char*>(buffer.data());
}

// A text cut short for an error message, control characters escaped.
std::string quoted(std::string_view text) {
    constexpr std::size_t kShown = 64;
    std::string out = "'";
    out += printable(text.substr(0, kShown));
    out += text.size() > kShown ? "...'" : "'";
    return out;
}

std::uint64_t pair_key(int left, int right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

// A stretch of the text: raw text to pre-tokenize (token -1) or a special token's occurrence.
struct Fragment {
    std::size_t begin;
    std::size_t size;
    int token;
};

}  // namespace

struct BpeTokenizer::Pattern {
    explicit Pattern(BpePre pre) {
        const std::string expr = expression(pre);
        int error = 0;
        PCRE2_SIZE offset = 0;
        code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expr.data()), expr.size(), PCRE2_UTF | PCRE2_UCP, &error,
                             &offset, nullptr);
        if (code == nullptr) {
            throw Error("PCRE2 cannot compile the pre-tokenizer's expression: " + pcre2_message(error));
        }
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where it cannot, pcre2_match interprets the pattern
        // A match backtracks at most over one run of white space, however long: no limit on those steps.
        context = pcre2_match_context_create(nullptr);
        if (context == nullptr) throw Error("out of memory for PCRE2's match context");
        pcre2_set_match_limit(context, UINT32_MAX);
    }
    ~Pattern() {
        pcre2_match_context_free(context);
        pcre2_code_free(code);
    }
    Pattern(const Pattern&) = delete;
    Pattern& operator=(const Pattern&) = delete;

    static std::shared_ptr<const Pattern> get(BpePre pre) {
        static const auto gpt2 = std::make_shared<const Pattern>(BpePre::gpt2);
        static const auto llama3 = std::make_shared<const Pattern>(BpePre::llama3);
        return pre == BpePre::llama3 ? llama3 : gpt2;
    }

    pcre2_code* code = nullptr;
    pcre2_match_context* context = nullptr;
};

// What one encode() call reuses from piece to piece.
struct BpeTokenizer::Workspace {
    struct Symbol {
        std::size_t begin;   // in `mapped`
        std::uint32_t size;  // 0 once merged into the symbol on its left
        int id;              // -1 when no token has the text
        int prev;
        int next;
    };

    explicit Workspace(const Pattern& pattern)
        : match(pcre2_match_data_create_from_pattern(pattern.code, nullptr), pcre2_match_data_free) {
        if (!match) throw Error("out of memory for PCRE2's match data");
    }

    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match;
    std::string clean;
    std::string subject;
    std::string mapped;
    std::vector<Symbol> symbols;
    // Merges found between neighbours, (rank << 32) | left symbol: a min-heap, so lowest rank, then leftmost.
    std::vector<std::uint64_t> candidates;
};

std::optional<BpePre> parse_bpe_pre(std::string_view name) {
    if (name == "gpt-2") return BpePre::gpt2;
    if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return BpePre::llama3;
    return std::nullopt;
}

BpeTokenizer::BpeTokenizer(std::vector<std::string> tokens, std::vector<TokenType> types,
                           const std::vector<std::string_view>& merges, BpePre pre, const std::string& name)
    : texts_(std::move(tokens)), types_(std::move(types)), pattern_(Pattern::get(pre)), pre_(pre) {
    if (texts_.size() != types_.size()) {
        throw Error(name + ": " + std::to_string(texts_.size()) + " tokens but " + std::to_string(types_.size()) +
                    " token types");
    }
    bytes_.resize(texts_.size());
    for (int id = 0; id < size(); id++) {
        std::string& text = texts_[id];
        if (text.empty()) text = "[EMPTY_" + std::to_string(id) + "]";  // llama.cpp's name for an empty token
        const auto [it, added] = ids_.emplace(text, id);
        if (!added) {
            throw Error(name + ": tokens " + std::to_string(it->second) + " and " + std::to_string(id) +
                        " have the same text " + quoted(text));
        }
        bytes_[id] = decoded(id, name);
        if (types_[id] == TokenType::control || types_[id] == TokenType::unknown ||
            types_[id] == TokenType::user_defined) {
            specials_.push_back(id);
        }
    }
    std::stable_sort(specials_.begin(), specials_.end(),
                     [&](int a, int b) { return texts_[a].size() > texts_[b].size(); });
    for (int b = 0; b < 256; b++) byte_ids_[b] = find(byte_mapping().text[b]);
    read_merges(merges, name);
}

std::string BpeTokenizer::decoded(int id, const std::string& name) const {
    const std::string& text = texts_[id];
    switch (types_[id]) {
        case TokenType::normal:
            if (auto bytes = unmap(text)) return *bytes;
            throw Error(name + ": token " + std::to_string(id) + " " + quoted(text) +
                        " is a normal token whose text is not in GPT-2's byte mapping");
        case TokenType::byte:
            if (auto byte = byte_token(text)) return std::string(1, *byte);
            throw Error(name + ": token " + std::to_string(id) + " " + quoted(text) +
                        " is a byte token whose text is not <0xHH>");
        case TokenType::user_defined:
            return text;
        default:  // control, unknown, unused, undefined: never printed (llama.cpp's token_to_piece, no `special`)
            return {};
    }
}

// Each merge "A B" (split at its first space after the first byte, as llama.cpp splits it) by its rank; the
// first of two equal merges keeps its rank.
void BpeTokenizer::read_merges(const std::vector<std::string_view>& merges, const std::string& name) {
    for (std::size_t i = 0; i < merges.size(); i++) {
        const std::string_view merge = merges[i];
        const auto refuse = [&](const std::string& why) {
            return Error(name + ": merge " + std::to_string(i) + " " + quoted(merge) + " " + why);
        };
        const std::size_t space = merge.find(' ', 1);
        if (space == std::string_view::npos) throw refuse("is not two tokens separated by a space");
        const std::string_view left = merge.substr(0, space), right = merge.substr(space + 1);
        for (const std::string_view part : {left, right}) {
            if (find(part) < 0) throw refuse("names " + quoted(part) + ", which is no token");
        }
        const Merge entry{static_cast<int>(i), find(std::string(left) + std::string(right))};
        merges_.emplace(pair_key(find(left), find(right)), entry);
    }
}

int BpeTokenizer::find(std::string_view text) const {
    const auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
}

std::string_view BpeTokenizer::bytes(int id) const {
    if (id < 0 || id >= size()) {
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary's " + std::to_string(size()) +
                    " tokens");
    }
    return bytes_[id];
}

std::vector<int> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
    if (text.size() > kMaxText) {
        throw Error("a text of " + std::to_string(text.size()) + " bytes is more than the tokenizer takes (" +
                    std::to_string(kMaxText) + ")");
    }
    // llama.cpp's tokenizer_st_partition: each special token in turn, longest first, cuts every occurrence of
    // its text out of the raw fragments the ones before it left.
    std::vector<Fragment> fragments, next;
    if (!text.empty()) fragments.push_back({0, text.size(), -1});
    for (const int id : specials_) {
        if (!parse_special && types_[id] != TokenType::user_defined) continue;
        const std::string& special = texts_[id];
        next.clear();
        for (const Fragment& fragment : fragments) {
            if (fragment.token >= 0) {
                next.push_back(fragment);
                continue;
            }
            const std::size_t end = fragment.begin + fragment.size;
            std::size_t pos = fragment.begin;
            for (std::size_t at; (at = text.substr(0, end).find(special, pos)) != std::string_view::npos;
                 pos = at + special.size()) {
                if (at > pos) next.push_back({pos, at - pos, -1});
                next.push_back({at, special.size(), id});
            }
            if (pos < end) next.push_back({pos, end - pos, -1});
        }
        fragments.swap(next);
    }

    std::vector<int> out;
    Workspace work(*pattern_);
    for (const Fragment& fragment : fragments) {
        if (fragment.token >= 0) {
            out.push_back(fragment.token);
        } else {
            encode_text(text.substr(fragment.begin, fragment.size), work, out);
        }
    }
    return out;
}

// Pre-tokenizes `text` and encodes each piece: every match of the expression, and any text between matches.
void BpeTokenizer::encode_text(std::string_view text, Workspace& work, std::vector<int>& out) const {
    clean_text(text, work.clean, work.subject);
    const std::string_view clean = work.clean;
    const auto subject = reinterpret_cast<PCRE2_SPTR>(work.subject.data());
    const std::size_t length = work.subject.size();
    std::size_t done = 0;
    while (done < length) {
        const int rc = pcre2_match(pattern_->code, subject, length, done, PCRE2_NO_UTF_CHECK, work.match.get(),
                                     pattern_->context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) throw Error("the pre-tokenizer failed: " + pcre2_message(rc));
        const PCRE2_SIZE* range = pcre2_get_ovector_pointer(work.match.get());
        if (range[1] <= done) break;  // an empty match: the rest is one piece
        if (range[0] > done) encode_piece(clean.substr(done, range[0] - done), work, out);
        encode_piece(clean.substr(range[0], range[1] - range[0]), work, out);
        done = range[1];
    }
    if (done < length) encode_piece(clean.substr(done), work, out);
}

// llama.cpp's llm_tokenizer_bpe_session on one piece: its bytes as the byte mapping's characters, then the
// lowest-ranked merge of two neighbours, leftmost first among equals, until none applies. A merged text that no
// token has stays unmerged from then on and goes out as the tokens of its single bytes, where they exist.
void BpeTokenizer::encode_piece(std::string_view piece, Workspace& work, std::vector<int>& out) const {
    using Symbol = Workspace::Symbol;
    std::string& mapped = work.mapped;
    std::vector<Symbol>& symbols = work.symbols;
    mapped.clear();
    symbols.clear();
    for (const char c : piece) {
        const auto b = static_cast<unsigned char>(c);
        const std::string& character = byte_mapping().text[b];
        const int index = static_cast<int>(symbols.size());
        symbols.push_back(
            {mapped.size(), static_cast<std::uint32_t>(character.size()), byte_ids_[b], index - 1, index + 1});
        mapped += character;
    }
    symbols.back().next = -1;
    // Llama 3 (llama.cpp's ignore_merges): a piece that is a whole token is that token.
    if (pre_ == BpePre::llama3) {
        if (const int id = find(mapped); id >= 0) {
            out.push_back(id);
            return;
        }
    }

    // The merge of symbol `left` with its right neighbour, or null.
    const auto merge_at = [&](int left) -> const Merge* {
        if (left < 0 || symbols[left].next < 0) return nullptr;
        const int a = symbols[left].id, b = symbols[symbols[left].next].id;
        if (a < 0 || b < 0) return nullptr;
        const auto it = merges_.find(pair_key(a, b));
        return it == merges_.end() ? nullptr : &it->second;
    };
    std::vector<std::uint64_t>& heap = work.candidates;
    heap.clear();
    const auto consider = [&](int left) {
        if (const Merge* merge = merge_at(left)) {
            heap.push_back((static_cast<std::uint64_t>(merge->rank) << 32) | static_cast<std::uint32_t>(left));
            std::push_heap(heap.begin(), heap.end(), std::greater<>());
        }
    };
    for (int i = 0; i + 1 < static_cast<int>(symbols.size()); i++) consider(i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        const auto rank = static_cast<int>(heap.back() >> 32);
        const auto left = static_cast<int>(heap.back() & 0xFFFFFFFF);
        heap.pop_back();
        // Still the pair it was found for: a rank names one pair of texts, and a symbol's text only grows.
        const Merge* merge = symbols[left].size > 0 ? merge_at(left) : nullptr;
        if (merge == nullptr || merge->rank != rank) continue;
        Symbol& symbol = symbols[left];
        Symbol& right = symbols[symbol.next];
        symbol.size += right.size;
        symbol.id = merge->result;
        right.size = 0;
        symbol.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = left;
        consider(symbol.prev);
        consider(left);
    }

    for (int i = 0; i >= 0; i = symbols[i].next) {
        const Symbol& symbol = symbols[i];
        if (symbol.id >= 0) {
            out.push_back(symbol.id);
            continue;
        }
        for (const char c : std::string_view(mapped).substr(symbol.begin, symbol.size)) {
            if (const int id = find(std::string_view(&c, 1)); id >= 0) out.push_back(id);
        }
    }
}

}  // namespace llamacl
