// Byte-level BPE tests: small hand-built vocabularies for each rule (the byte mapping, merges by rank, the
// two pre-tokenizers, special tokens, errors for a hostile vocabulary, hostile text), then llama.cpp's own
// tokenizer tests through the shared GGUF vocabularies.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "llamacl/bpe_tokenizer.hpp"
#include "llamacl/error.hpp"
#include "llamacl/gguf_file.hpp"
#include "support.hpp"

namespace {

using llamacl::BpePre;
using llamacl::BpeTokenizer;
using llamacl::TokenType;

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// GPT-2's bytes_to_unicode(), written out again from its definition: byte b's character in token texts.
std::string mapped(unsigned char b) {
    const auto printable = [](unsigned v) { return (v >= 0x21 && v <= 0x7E) || (v >= 0xA1 && v <= 0xAC) || v >= 0xAE; };
    std::uint32_t cp = b;
    if (!printable(b)) {
        cp = 0x100;
        for (unsigned v = 0; v < b; v++) cp += printable(v) ? 0 : 1;
    }
    std::string out;
    append_utf8(out, cp);
    return out;
}

std::string mapped(std::string_view text) {
    std::string out;
    for (const char c : text) out += mapped(static_cast<unsigned char>(c));
    return out;
}

// A vocabulary: the 256 byte characters as ids 0..255 (id == byte), then `extra` normal tokens (given as
// plain text, mapped here), then `specials` with their types.
struct Vocab {
    std::vector<std::string> extra;
    std::vector<std::string> merges;  // "A B" in plain text; mapped here
    std::vector<std::pair<std::string, TokenType>> specials;

    BpeTokenizer build(BpePre pre = BpePre::gpt2) const {
        std::vector<std::string> tokens;
        std::vector<TokenType> types;
        for (int b = 0; b < 256; b++) tokens.push_back(mapped(static_cast<unsigned char>(b)));
        for (const auto& text : extra) tokens.push_back(mapped(text));
        types.assign(tokens.size(), TokenType::normal);
        for (const auto& [text, type] : specials) {
            tokens.push_back(text);
            types.push_back(type);
        }
        std::vector<std::string> merge_texts;
        for (const auto& merge : merges) {
            const auto space = merge.find(' ', 1);
            merge_texts.push_back(space == std::string::npos
                                      ? mapped(merge)
                                      : mapped(merge.substr(0, space)) + " " + mapped(merge.substr(space + 1)));
        }
        const std::vector<std::string_view> views(merge_texts.begin(), merge_texts.end());
        return BpeTokenizer(std::move(tokens), std::move(types), views, pre, "test-vocab");
    }
};

// The id of an extra token of `vocab`.
int id_of(const Vocab& vocab, const std::string& text) {
    for (std::size_t i = 0; i < vocab.extra.size(); i++) {
        if (vocab.extra[i] == text) return 256 + static_cast<int>(i);
    }
    ADD_FAILURE() << "no token " << text;
    return -1;
}

std::vector<int> byte_ids(std::string_view text) {
    std::vector<int> ids;
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
}

std::string decode(const BpeTokenizer& tok, const std::vector<int>& ids) {
    std::string out;
    for (const int id : ids) out += tok.bytes(id);
    return out;
}

// The message of the llamacl::Error that `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const llamacl::Error& e) {
        return e.what();
    }
    return "";
}

TEST(BpeTokenizer, ParsesPreTokenizerNames) {
    EXPECT_EQ(llamacl::parse_bpe_pre("gpt-2"), BpePre::gpt2);
    EXPECT_EQ(llamacl::parse_bpe_pre("llama-bpe"), BpePre::llama3);
    EXPECT_EQ(llamacl::parse_bpe_pre("llama3"), BpePre::llama3);
    EXPECT_EQ(llamacl::parse_bpe_pre("qwen2"), std::nullopt);
    EXPECT_EQ(llamacl::parse_bpe_pre(""), std::nullopt);
}

TEST(BpeTokenizer, ByteMappingRoundTripsAll256Bytes) {
    const BpeTokenizer tok = Vocab{}.build();
    ASSERT_EQ(tok.size(), 256);
    for (int b = 0; b < 256; b++) EXPECT_EQ(tok.bytes(b), std::string(1, static_cast<char>(b))) << b;
    // Spot checks of the mapping itself: space is U+0120, newline U+010A, 'a' itself, 0xAD U+0143.
    EXPECT_EQ(tok.find("\xC4\xA0"), ' ');
    EXPECT_EQ(tok.find("\xC4\x8A"), '\n');
    EXPECT_EQ(tok.find("a"), 'a');
    EXPECT_EQ(tok.find("\xC5\x83"), 0xAD);
    // Valid UTF-8 text, NUL and control bytes included, goes through unchanged.
    const std::string text = std::string("h\xC3\xA9llo\0 w\x01rld\n\t\xF0\x9F\xA6\x99 \xE2\x82\xAC", 23);
    EXPECT_EQ(tok.encode(text, false), byte_ids(text));
    EXPECT_EQ(decode(tok, tok.encode(text, false)), text);
}

TEST(BpeTokenizer, MergesLowestRankFirst) {
    Vocab vocab{{"ab", "bc", "abc"}, {"b c", "a b", "ab c"}, {}};
    EXPECT_EQ(vocab.build().encode("abc", false), (std::vector<int>{'a', id_of(vocab, "bc")}));
    vocab.merges = {"a b", "b c", "ab c"};
    EXPECT_EQ(vocab.build().encode("abc", false), (std::vector<int>{id_of(vocab, "abc")}));
}

TEST(BpeTokenizer, EqualRanksMergeLeftmostFirst) {
    const Vocab vocab{{"aa"}, {"a a"}, {}};
    const BpeTokenizer tok = vocab.build();
    const int aa = id_of(vocab, "aa");
    EXPECT_EQ(tok.encode("aaa", false), (std::vector<int>{aa, 'a'}));
    EXPECT_EQ(tok.encode("aaaaa", false), (std::vector<int>{aa, aa, 'a'}));
}

TEST(BpeTokenizer, FirstOfTwoEqualMergesKeepsItsRank) {
    const Vocab vocab{{"ab", "bc"}, {"a b", "b c", "a b"}, {}};
    EXPECT_EQ(vocab.build().encode("abc", false), (std::vector<int>{id_of(vocab, "ab"), 'c'}));
}

TEST(BpeTokenizer, MergedTextWithoutTokenGoesOutAsItsSingleByteTokens) {
    // llama.cpp looks each byte of the mapped text up as a one-byte token: 'a' and 'b' are tokens, but no
    // token is one byte of the two-byte characters that stand for the bytes of "\xC3\xA9", so they vanish.
    const Vocab vocab{{}, {"a b", "\xC3 \xA9"}, {}};
    const BpeTokenizer tok = vocab.build();
    EXPECT_EQ(tok.encode("ab", false), (std::vector<int>{'a', 'b'}));
    EXPECT_EQ(tok.encode("\xC3\xA9", false), std::vector<int>{});
}

TEST(BpeTokenizer, MergesStayInsidePreTokenizerPieces) {
    // "b " never merges: GPT-2's expression puts the space in front of the next word.
    const Vocab vocab{{"b ", " a"}, {"b  ", "  a"}, {}};
    const BpeTokenizer tok = vocab.build();
    EXPECT_EQ(tok.encode("ab ab", false), (std::vector<int>{'a', 'b', id_of(vocab, " a"), 'b'}));
}

TEST(BpeTokenizer, Llama3SplitsNumbersInThrees) {
    const Vocab vocab{{"11", "111"}, {"1 1", "11 1"}, {}};
    const int one3 = id_of(vocab, "111"), one2 = id_of(vocab, "11");
    EXPECT_EQ(vocab.build(BpePre::llama3).encode("11111", false), (std::vector<int>{one3, one2}));
    EXPECT_EQ(vocab.build(BpePre::gpt2).encode("11111", false), (std::vector<int>{one2, one3}));
    EXPECT_EQ(vocab.build(BpePre::llama3).encode("1111", false), (std::vector<int>{one3, '1'}));
    EXPECT_EQ(vocab.build(BpePre::gpt2).encode("1111", false), (std::vector<int>{one2, one2}));
}

TEST(BpeTokenizer, Llama3TakesAWholePieceThatIsAToken) {
    // llama.cpp's ignore_merges: "abc" is a token but no merge makes it.
    const Vocab vocab{{"abc"}, {}, {}};
    EXPECT_EQ(vocab.build(BpePre::llama3).encode("abc", false), (std::vector<int>{id_of(vocab, "abc")}));
    EXPECT_EQ(vocab.build(BpePre::gpt2).encode("abc", false), (std::vector<int>{'a', 'b', 'c'}));
}

TEST(BpeTokenizer, PreTokenizersDifferAsTheirExpressions) {
    // Whole pieces are visible through tokens that exist for them only (Llama 3 takes a piece that is a token).
    const Vocab vocab{{"'S", "\tx", " !!\n", " \n\n", "  ", "\xE1\xA0\x8E\xE1\xA0\x8E!"}, {}, {}};
    const BpeTokenizer tok = vocab.build(BpePre::llama3);
    EXPECT_EQ(tok.encode("'S", false), (std::vector<int>{id_of(vocab, "'S")}));      // contractions ignore case
    EXPECT_EQ(tok.encode("\tx", false), (std::vector<int>{id_of(vocab, "\tx")}));    // one non-letter before letters
    EXPECT_EQ(tok.encode(" !!\n", false), (std::vector<int>{id_of(vocab, " !!\n")}));  // punctuation takes newlines
    EXPECT_EQ(tok.encode(" \n\n", false), (std::vector<int>{id_of(vocab, " \n\n")}));  // \s*[\r\n]+
    // A run of spaces before a word leaves its last space to the word.
    EXPECT_EQ(tok.encode("   x", false), (std::vector<int>{id_of(vocab, "  "), ' ', 'x'}));
    // U+180E is no white space to llama.cpp (nor to Unicode since 6.3), though it is to PCRE2's \s.
    EXPECT_EQ(tok.encode("\xE1\xA0\x8E\xE1\xA0\x8E!", false),
              (std::vector<int>{id_of(vocab, "\xE1\xA0\x8E\xE1\xA0\x8E!")}));
}

TEST(BpeTokenizer, InvalidUtf8ReadsAsLlamaCppReadsIt) {
    const BpeTokenizer tok = Vocab{}.build();
    const std::string fffd = "\xEF\xBF\xBD";
    EXPECT_EQ(tok.encode("a\xFF" "b", false), byte_ids("a" + fffd + "b"));                // a stray byte
    EXPECT_EQ(tok.encode("\xE2\x82", false), byte_ids(fffd + fffd));                      // cut short
    EXPECT_EQ(tok.encode("\xC1\x81", false), byte_ids("A"));                              // overlong: its code point
    EXPECT_EQ(tok.encode("\xED\xA0\x80", false), byte_ids("\xED\xA0\x80"));               // a surrogate stays
    EXPECT_EQ(tok.encode("\xF4\x90\x80\x80", false), byte_ids(fffd));                     // past U+10FFFF
}

TEST(BpeTokenizer, SpecialTokensSplitTheTextFirst) {
    const Vocab vocab{{}, {}, {{"<|eot|>", TokenType::control}, {"<u>", TokenType::user_defined},
                              {"<u>x", TokenType::unknown}}};
    const BpeTokenizer tok = vocab.build();
    const int eot = 256, user = 257, unknown = 258;
    EXPECT_EQ(tok.encode("a<|eot|>b", true), (std::vector<int>{'a', eot, 'b'}));
    EXPECT_EQ(tok.encode("a<|eot|>b", false), byte_ids("a<|eot|>b"));
    EXPECT_EQ(tok.encode("<u><u>", false), (std::vector<int>{user, user}));
    // Longest first: with parse_special "<u>x" takes its text before "<u>" can.
    EXPECT_EQ(tok.encode("<u>x<u>", true), (std::vector<int>{unknown, user}));
    EXPECT_EQ(tok.encode("<u>x<u>", false), (std::vector<int>{user, 'x', user}));
    EXPECT_EQ(tok.encode("", true), std::vector<int>{});
}

TEST(BpeTokenizer, BytesOfEachTokenType) {
    const Vocab vocab{{"he"}, {}, {{"<|c|>", TokenType::control}, {"<u> \xFF", TokenType::user_defined},
                                   {"<0x0A>", TokenType::byte}, {"<unk>", TokenType::unknown},
                                   {"<unused>", TokenType::unused}}};
    const BpeTokenizer tok = vocab.build();
    EXPECT_EQ(tok.bytes(256), "he");
    EXPECT_EQ(tok.bytes(257), "");
    EXPECT_EQ(tok.bytes(258), "<u> \xFF");
    EXPECT_EQ(tok.bytes(259), "\n");
    EXPECT_EQ(tok.bytes(260), "");
    EXPECT_EQ(tok.bytes(261), "");
    EXPECT_EQ(tok.type(257), TokenType::control);
    EXPECT_EQ(tok.find("<|c|>"), 257);
    EXPECT_EQ(tok.find("nothing"), -1);
    EXPECT_NE(error_of([&] { (void)tok.bytes(262); }).find("token id 262"), std::string::npos);
    EXPECT_NE(error_of([&] { (void)tok.bytes(-1); }).find("token id -1"), std::string::npos);
}

TEST(BpeTokenizer, RefusesBadMerges) {
    const auto message = [](std::vector<std::string> merges) {
        return error_of([&] { Vocab{{"ab"}, merges, {}}.build(); });
    };
    EXPECT_NE(message({"a b", "ab"}).find("test-vocab: merge 1 'ab' is not two tokens"), std::string::npos);
    EXPECT_NE(message({"a b", "a b", "a xyz"}).find("merge 2 'a xyz' names 'xyz', which is no token"),
              std::string::npos);
    EXPECT_NE(message({"a  b"}).find("merge 0"), std::string::npos);  // "a" and " b": one space too many
    EXPECT_NE(message({""}).find("merge 0 '' is not two tokens"), std::string::npos);
    EXPECT_EQ(message({"a b", "ab b"}), "");
}

TEST(BpeTokenizer, RefusesBadTokenTexts) {
    const auto build = [](std::vector<std::string> tokens, std::vector<TokenType> types) {
        return error_of([&] { BpeTokenizer(tokens, types, {}, BpePre::gpt2, "v.gguf"); });
    };
    using T = TokenType;
    EXPECT_NE(build({"a", "a b"}, {T::normal, T::normal}).find("v.gguf: token 1 'a b' is a normal token"),
              std::string::npos);
    EXPECT_NE(build({"\xC3"}, {T::normal}).find("token 0"), std::string::npos);          // cut-short UTF-8
    EXPECT_NE(build({"\xC1\x81"}, {T::normal}).find("token 0"), std::string::npos);      // overlong 'A'
    EXPECT_NE(build({"\xC5\x84"}, {T::normal}).find("token 0"), std::string::npos);      // U+0144, past the mapping
    EXPECT_NE(build({"a", "<0xZZ>"}, {T::normal, T::byte}).find("token 1 '<0xZZ>' is a byte token"),
              std::string::npos);
    EXPECT_NE(build({"a", "b", "a"}, {T::normal, T::normal, T::normal}).find("tokens 0 and 2 have the same text"),
              std::string::npos);
    EXPECT_NE(build({"a"}, {}).find("1 tokens but 0 token types"), std::string::npos);
    EXPECT_EQ(build({"a b", ""}, {T::user_defined, T::normal}), "");
}

TEST(BpeTokenizer, EmptyTokenTextIsNamedAsLlamaCppNamesIt) {
    const BpeTokenizer tok({"a", ""}, {TokenType::normal, TokenType::normal}, {}, BpePre::gpt2, "v");
    EXPECT_EQ(tok.find("[EMPTY_1]"), 1);
    EXPECT_EQ(tok.find(""), -1);
}

TEST(BpeTokenizer, HostileTextGivesIds) {
    const Vocab vocab{{"aa", "aaaa"}, {"a a", "aa aa"}, {}};
    for (const BpePre pre : {BpePre::gpt2, BpePre::llama3}) {
        const BpeTokenizer tok = vocab.build(pre);
        const std::string letters(1 << 20, 'a');
        const auto ids = tok.encode(letters, false);
        EXPECT_EQ(ids.size(), letters.size() / 4);
        EXPECT_EQ(decode(tok, ids), letters);
        for (const std::string& text : {std::string(1 << 20, ' '), std::string(1 << 20, '\0'),
                                        std::string(1 << 20, '\xFF'), std::string(1 << 20, '7'),
                                        std::string(1 << 20, '\n')}) {
            EXPECT_FALSE(tok.encode(text, true).empty());
        }
        std::string mixed;
        for (int i = 0; i < (1 << 16); i++) mixed += " \t\r\n\xC2\x85" "a1!\xE0\x80";
        EXPECT_FALSE(tok.encode(mixed, true).empty());
    }
}

// llama.cpp's tokenizer tests: strings separated by "\n__ggml_vocab_test__\n", each ending in one.
std::vector<std::string> read_inputs(const std::filesystem::path& path) {
    const std::string text = llamacl::test::read_file(path);
    const std::string separator = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    for (std::size_t pos = 0; pos < text.size();) {
        const std::size_t next = text.find(separator, pos);
        if (next == std::string::npos) {
            inputs.push_back(text.substr(pos));
            break;
        }
        inputs.push_back(text.substr(pos, next - pos));
        pos = next + separator.size();
    }
    return inputs;
}

std::vector<std::vector<int>> read_outputs(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<std::vector<int>> outputs;
    for (std::string line; std::getline(in, line);) {
        std::istringstream ids(line);
        outputs.emplace_back();
        for (int id; ids >> id;) outputs.back().push_back(id);
    }
    return outputs;
}

// The tokenizer of a GGUF file's vocabulary (tokenizer.ggml.tokens, token_type, merges and pre).
BpeTokenizer load_vocab(const llamacl::GgufFile& file) {
    const llamacl::GgufValue* tokens = file.array("tokenizer.ggml.tokens", llamacl::GgufType::string);
    const llamacl::GgufValue* types = file.array("tokenizer.ggml.token_type", llamacl::GgufType::i32);
    const llamacl::GgufValue* merges = file.array("tokenizer.ggml.merges", llamacl::GgufType::string);
    const auto pre = llamacl::parse_bpe_pre(file.string("tokenizer.ggml.pre").value_or("gpt-2"));
    if (tokens == nullptr || types == nullptr || merges == nullptr || !pre) ADD_FAILURE() << "not a BPE vocabulary";
    std::vector<std::string> texts;
    std::vector<TokenType> type_list;
    for (std::uint64_t i = 0; i < tokens->count; i++) {
        texts.emplace_back(tokens->string_at(i));
        std::int32_t type = 0;
        std::memcpy(&type, types->data + 4 * i, sizeof type);
        type_list.push_back(static_cast<TokenType>(type));
    }
    std::vector<std::string_view> merge_list;
    for (std::uint64_t i = 0; i < merges->count; i++) merge_list.push_back(merges->string_at(i));
    return BpeTokenizer(std::move(texts), std::move(type_list), merge_list, *pre, file.path());
}

void expect_reference_ids(const std::filesystem::path& model, const std::filesystem::path& inputs,
                          const std::filesystem::path& outputs, std::vector<int> prefix) {
    const auto file = llamacl::GgufFile::open(model.string());
    const BpeTokenizer tok = load_vocab(file);
    const auto texts = read_inputs(inputs);
    const auto expected = read_outputs(outputs);
    ASSERT_EQ(texts.size(), expected.size());
    for (std::size_t i = 0; i < texts.size(); i++) {
        std::vector<int> ids = prefix;
        const auto encoded = tok.encode(texts[i], false);
        ids.insert(ids.end(), encoded.begin(), encoded.end());
        EXPECT_EQ(ids, expected[i]) << "text " << i << ": " << llamacl::printable(texts[i]);
        EXPECT_EQ(decode(tok, encoded), texts[i]) << "text " << i;
    }
}

TEST(BpeTokenizer, MatchesLlamaCppOnGpt2Vocabulary) {
    LLAMACL_REQUIRE_SHARED(shared);
    expect_reference_ids(shared / "models/gguf/ggml-vocab-gpt-2.gguf", shared / "reference/gguf/vocab-gpt-2.inp",
                         shared / "reference/gguf/vocab-gpt-2.out", {});
}

TEST(BpeTokenizer, MatchesLlamaCppOnLlama3PreTokenizer) {
    LLAMACL_REQUIRE_SHARED(shared);
    const int bos = 50257;
    expect_reference_ids(shared / "models/gguf/l3-tiny-f32.gguf", shared / "reference/gguf/vocab-llama-bpe.inp",
                         shared / "reference/gguf/l3-tiny-tokenize.out", {bos});
}

TEST(BpeTokenizer, ControlTokensOfTheLlama3VocabularyNeedParseSpecial) {
    LLAMACL_REQUIRE_SHARED(shared);
    const auto file = llamacl::GgufFile::open((shared / "models/gguf/l3-tiny-f32.gguf").string());
    const BpeTokenizer tok = load_vocab(file);
    const std::string text = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
    const auto ids = tok.encode(text, true);
    ASSERT_EQ(ids.size(), 6u);
    EXPECT_EQ(ids[0], 50259);
    EXPECT_EQ(ids[2], 50260);
    EXPECT_EQ(ids[5], 50261);
    EXPECT_GT(tok.encode(text, false).size(), 10u);
    EXPECT_EQ(tok.bytes(50261), "");
}

}  // namespace
