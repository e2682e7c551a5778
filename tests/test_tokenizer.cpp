// Tokenizer tests: small hand-made tokenizer files for each rule of run.c's encode/decode, the file
// validation errors, and the shared Llama 2 / tok512 tokenizers against ids recorded from run.c.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/tokenizer.hpp"
#include "support.hpp"

namespace {

using llamacl::Tokenizer;
using llamacl::test::TempDir;

struct Entry {
    std::string piece;
    float score = 0.0f;
};

void put_i32(std::string& out, std::int32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_f32(std::string& out, float v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

// The bytes of a llama2.c tokenizer.bin holding `entries` in id order.
// max_token_length defaults to the longest piece, as llama2.c's exporter writes it.
std::string tokenizer_bytes(const std::vector<Entry>& entries,
                            std::optional<std::int32_t> max_token_length = std::nullopt) {
    std::int32_t max_len = 1;
    for (const auto& e : entries) max_len = std::max(max_len, static_cast<std::int32_t>(e.piece.size()));
    std::string out;
    put_i32(out, max_token_length.value_or(max_len));
    for (const auto& e : entries) {
        put_f32(out, e.score);
        put_i32(out, static_cast<std::int32_t>(e.piece.size()));
        out += e.piece;
    }
    return out;
}

std::string write_file(const TempDir& dir, const std::string& name, const std::string& bytes) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
}

std::string write_tokenizer(const TempDir& dir, const std::vector<Entry>& entries) {
    return write_file(dir, "tokenizer.bin", tokenizer_bytes(entries));
}

// The Llama layout: <unk>, <s>, </s>, then the 256 byte pieces <0x00>..<0xFF> (so byte b is id
// b + 3), then `extra` from id 259 on.
std::vector<Entry> llama_layout(const std::vector<Entry>& extra) {
    std::vector<Entry> entries = {{"<unk>"}, {"\n<s>\n"}, {"\n</s>\n"}};
    for (int b = 0; b < 256; b++) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        entries.push_back({name});
    }
    entries.insert(entries.end(), extra.begin(), extra.end());
    return entries;
}
constexpr int kFirstExtra = 259;

// Asserts that `fn` throws llamacl::Error whose message names `path` and contains `what`.
template <typename Fn>
void expect_error(Fn fn, const std::string& path, const std::string& what) {
    try {
        fn();
        ADD_FAILURE() << "expected llamacl::Error mentioning \"" << what << "\"";
    } catch (const llamacl::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find(what), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "message must be one line: " << msg;
    }
}

using Ids = std::vector<int>;

TEST(Tokenizer, LoadsEntriesInFileOrder) {
    TempDir dir;
    const auto path = write_tokenizer(dir, {{"a", 1.5f}, {"bc", -2.0f}, {"", 0.0f}, {" ", 3.0f}});
    const Tokenizer t = Tokenizer::load(path, 4);
    EXPECT_EQ(t.size(), 4);
    EXPECT_EQ(t.max_token_length(), 2);
    EXPECT_EQ(t.piece(1), "bc");
    EXPECT_EQ(t.piece(2), "");
    EXPECT_FLOAT_EQ(t.score(0), 1.5f);
    EXPECT_FLOAT_EQ(t.score(1), -2.0f);
}

TEST(Tokenizer, PiecesEndAtTheirFirstNul) {
    // run.c keeps pieces as C strings, so bytes after a NUL are invisible to it.
    TempDir dir;
    const auto path = write_tokenizer(dir, {{" "}, {"a"}, {"b"}, {std::string("ab\0cd", 5)}});
    const Tokenizer t = Tokenizer::load(path, 0);
    EXPECT_EQ(t.piece(3), "ab");
    EXPECT_EQ(t.encode("ab", false, false), (Ids{0, 3}));
}

TEST(Tokenizer, ByteFallbackForUnknownCharacters) {
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, llama_layout({{" "}, {"a"}})), 0);
    const int sp = kFirstExtra, a = kFirstExtra + 1;
    // 'z' and '~' have no piece: each becomes its byte-fallback token, byte + 3.
    EXPECT_EQ(t.encode("az~", false, false), (Ids{sp, a, 'z' + 3, '~' + 3}));
    EXPECT_EQ(t.encode("\x01", false, false), (Ids{sp, 0x01 + 3}));
}

TEST(Tokenizer, MultiByteCodePoints) {
    TempDir dir;
    const auto t = Tokenizer::load(
        write_tokenizer(dir, llama_layout({{" "}, {"\xC3\xA9"}, {"\xF0\x9F\x98\x80"}})), 0);
    const int sp = kFirstExtra, e_acute = kFirstExtra + 1, grin = kFirstExtra + 2;
    // A known 2-byte code point is one token.
    EXPECT_EQ(t.encode("\xC3\xA9", false, false), (Ids{sp, e_acute}));
    // An unknown 3-byte code point (U+20AC) falls back to one token per byte.
    EXPECT_EQ(t.encode("\xE2\x82\xAC", false, false), (Ids{sp, 0xE2 + 3, 0x82 + 3, 0xAC + 3}));
    // A known 4-byte code point is one token...
    EXPECT_EQ(t.encode("\xF0\x9F\x98\x80", false, false), (Ids{sp, grin}));
    // ...and a run of continuation bytes is cut after 4 bytes, the rest starting a new group.
    EXPECT_EQ(t.encode("\xF0\x9F\x98\x80\x80", false, false), (Ids{sp, grin, 0x80 + 3}));
    // Stray continuation bytes without a lead byte are grouped the same way.
    EXPECT_EQ(t.encode("\x80\x81", false, false), (Ids{sp, 0x80 + 3, 0x81 + 3}));
    // A code point between ASCII characters.
    EXPECT_EQ(t.encode("\x01\xC3\xA9\x01", false, false), (Ids{sp, 1 + 3, e_acute, 1 + 3}));
}

TEST(Tokenizer, MergesTheBestScoringPairFirst) {
    TempDir dir;
    const auto t = Tokenizer::load(
        write_tokenizer(dir, {{" "}, {"a"}, {"b"}, {"c"}, {"ab", 1.0f}, {"bc", 5.0f}, {"abc", 0.5f}}), 0);
    // "bc" (5.0) beats "ab" (1.0) although "ab" is further left; then "a"+"bc" = "abc" merges
    // despite its low score, because any pair in the vocabulary beats no merge at all.
    EXPECT_EQ(t.encode("abc", false, false), (Ids{0, 6}));
    // Without the "c", "ab" merges.
    EXPECT_EQ(t.encode("ab", false, false), (Ids{0, 4}));
    EXPECT_EQ(t.encode("cab", false, false), (Ids{0, 3, 4}));
}

TEST(Tokenizer, EqualScoresMergeLeftmostFirst) {
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, {{" "}, {"a"}, {"aa", 1.0f}}), 0);
    // Pairs (a,a) at 1 and at 2 score the same: the leftmost merges, leaving "aa","a".
    EXPECT_EQ(t.encode("aaa", false, false), (Ids{0, 2, 1}));
    EXPECT_EQ(t.encode("aaaaa", false, false), (Ids{0, 2, 2, 1}));
}

TEST(Tokenizer, DummyPrefixMergesWithTheFirstWord) {
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, {{" "}, {"a"}, {" a", 2.0f}}), 0);
    EXPECT_EQ(t.encode("a", false, false), (Ids{2}));
    EXPECT_EQ(t.encode("a a", false, false), (Ids{2, 2}));
}

TEST(Tokenizer, BosAndEosFlags) {
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, {{"<unk>"}, {"<s>"}, {"</s>"}, {" "}, {"a"}}), 0);
    EXPECT_EQ(t.encode("a", false, false), (Ids{3, 4}));
    EXPECT_EQ(t.encode("a", true, false), (Ids{1, 3, 4}));
    EXPECT_EQ(t.encode("a", false, true), (Ids{3, 4, 2}));
    EXPECT_EQ(t.encode("a", true, true), (Ids{1, 3, 4, 2}));
}

TEST(Tokenizer, EmptyTextHasNoDummyPrefix) {
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, {{"<unk>"}, {"<s>"}, {"</s>"}, {" "}}), 0);
    EXPECT_EQ(t.encode("", true, false), (Ids{1}));
    EXPECT_EQ(t.encode("", false, true), (Ids{2}));
    EXPECT_EQ(t.encode("", false, false), (Ids{}));
    // run.c gets a C string: a leading NUL makes the text empty, a later one ends it.
    EXPECT_EQ(t.encode(std::string_view("\0 ", 2), true, false), (Ids{1}));
    EXPECT_EQ(t.encode(std::string_view(" \0 ", 3), false, false), (Ids{3, 3}));
}

TEST(Tokenizer, DuplicatePiecesResolveLikeGlibcBsearch) {
    // Sorted (stable): " "(0) "x"(1) "x"(2) [ "y"(3) ]. bsearch probes the middle first:
    // with 3 entries that is index 1 (id 1), with 4 entries index 2 (id 2). A lower_bound
    // search would answer id 1 both times.
    TempDir dir3, dir4;
    const auto t3 = Tokenizer::load(write_tokenizer(dir3, {{" "}, {"x"}, {"x"}}), 0);
    const auto t4 = Tokenizer::load(write_tokenizer(dir4, {{" "}, {"x"}, {"x"}, {"y"}}), 0);
    EXPECT_EQ(t3.encode("x", false, false), (Ids{0, 1}));
    EXPECT_EQ(t4.encode("x", false, false), (Ids{0, 2}));
    // Many duplicates: the sort must keep them in id order (glibc's merge sort is stable), so
    // sorted index 20 of " ", "x" x 39 holds id 20, bsearch's first probe.
    TempDir dir40;
    std::vector<Entry> many = {{" "}};
    for (int i = 0; i < 39; i++) many.push_back({"x"});
    const auto t40 = Tokenizer::load(write_tokenizer(dir40, many), 0);
    EXPECT_EQ(t40.encode("x", false, false), (Ids{0, 20}));
}

TEST(Tokenizer, SortsByUnsignedBytesLikeStrcmp) {
    // strcmp compares unsigned bytes, so "\xC3\xA9" sorts after "x": sorted is " "(0) "x"(2)
    // "x"(3) "\xC3\xA9"(1) and bsearch's first probe (index 2) finds id 3. A signed compare would
    // sort "\xC3\xA9" first and find id 2.
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, {{" "}, {"\xC3\xA9"}, {"x"}, {"x"}}), 0);
    EXPECT_EQ(t.encode("x", false, false), (Ids{0, 3}));
    EXPECT_EQ(t.encode("\xC3\xA9x", false, false), (Ids{0, 1, 3}));
}

TEST(Tokenizer, NoSpacePieceIsAnError) {
    TempDir dir;
    const auto path = write_tokenizer(dir, {{"a"}, {"b"}});
    const auto t = Tokenizer::load(path, 0);
    expect_error([&] { t.encode("a", false, false); }, path, "\" \"");
    EXPECT_EQ(t.encode("", false, false), (Ids{}));  // no dummy prefix needed
}

TEST(Tokenizer, ByteFallbackBeyondTheVocabularyIsAnError) {
    TempDir dir;
    const auto path = write_tokenizer(dir, {{" "}, {"a"}});
    const auto t = Tokenizer::load(path, 0);
    expect_error([&] { t.encode("q", false, false); }, path, "byte-fallback");
}

TEST(Tokenizer, DecodeStripsTheLeadingSpaceAfterBos) {
    TempDir dir;
    const auto t = Tokenizer::load(
        write_tokenizer(dir, {{"<unk>"}, {"<s>"}, {"</s>"}, {" Hello"}, {"world"}, {" "}}), 0);
    EXPECT_EQ(t.decode(1, 3), "Hello");
    EXPECT_EQ(t.decode(4, 3), " Hello");
    EXPECT_EQ(t.decode(0, 3), " Hello");
    EXPECT_EQ(t.decode(1, 4), "world");
    EXPECT_EQ(t.decode(1, 5), "");
}

TEST(Tokenizer, DecodeRawBytePieces) {
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, llama_layout({{" <0x41>"}, {"<0x4"}})), 0);
    EXPECT_EQ(t.decode(5, 'A' + 3), "A");
    EXPECT_EQ(t.decode(5, '\n' + 3), "\n");
    EXPECT_EQ(t.decode(5, 0xE2 + 3), "\xE2");
    EXPECT_EQ(t.decode(5, 0xFF + 3), "\xFF");
    // Byte 0 is run.c's empty C string.
    EXPECT_EQ(t.decode(5, 0 + 3), "");
    // The leading space goes first after BOS, then the rest parses as a byte.
    EXPECT_EQ(t.decode(1, kFirstExtra), "A");
    EXPECT_EQ(t.decode(5, kFirstExtra), " <0x41>");
    // sscanf succeeds on one hex digit and no closing '>'.
    EXPECT_EQ(t.decode(5, kFirstExtra + 1), "\x04");
    // Other pieces are returned as they are.
    EXPECT_EQ(t.decode(5, 0), "<unk>");
}

// decode() reimplements sscanf(piece, "<0x%02hhX>", &b) == 1 by hand (so no locale can change
// it); check it against the C library itself, which in this test process is in the C locale.
TEST(Tokenizer, DecodeParsesBytesLikeSscanf) {
    const std::vector<std::string> pieces = {
        "<0x41>", "<0x41", "<0x4>", "<0x4", "<0xa0>", "<0xFf>", "<0x0>", "<0x00>", "<0x0x>",
        "<0x0x5>", "<0x0X7", "<0x-1>", "<0x+F>", "<0x-F>", "<0x-0>", "<0x-x>", "<0x+>", "<0x->",
        "<0x 7>", "<0x\t\n4F>", "<0x  >", "<0x>", "<0x", "<0xG1>", "<0x1G>", "<0x123>", "<0X41>",
        "<1x41>", " <0x41>", "<0x\v-A>", "<0x- A>", "<0x0\xff>", "<0x9\x80>", "hello", "<", "<0",
        "<0x0-", "<0x+0x1>", "<0x00x1"};
    TempDir dir;
    std::vector<Entry> entries = {{"<unk>"}, {"<s>"}, {"</s>"}};
    for (const auto& p : pieces) entries.push_back({p});
    const auto t = Tokenizer::load(write_tokenizer(dir, entries), 0);
    for (std::size_t i = 0; i < pieces.size(); i++) {
        SCOPED_TRACE("piece \"" + pieces[i] + "\"");
        unsigned char byte = 0;
        const bool is_byte = std::sscanf(pieces[i].c_str(), "<0x%02hhX>", &byte) == 1;
        const std::string_view got = t.decode(0, static_cast<int>(i) + 3);
        if (is_byte) {
            EXPECT_EQ(got, byte == 0 ? std::string() : std::string(1, static_cast<char>(byte)));
        } else {
            EXPECT_EQ(got, pieces[i]);
        }
    }
}

TEST(Tokenizer, OutOfRangeIdsAreErrors) {
    TempDir dir;
    const auto path = write_tokenizer(dir, {{" "}, {"a"}});
    const auto t = Tokenizer::load(path, 0);
    expect_error([&] { t.piece(2); }, path, "out of range");
    expect_error([&] { t.piece(-1); }, path, "out of range");
    expect_error([&] { t.decode(0, 7); }, path, "out of range");
    expect_error([&] { t.decode(1, -3); }, path, "out of range");
    // BOS (id 1) must exist for the merge loop to read its piece.
    const auto path1 = write_file(dir, "one.bin", tokenizer_bytes({{" "}}));
    const auto t1 = Tokenizer::load(path1, 0);
    expect_error([&] { t1.encode(" ", true, false); }, path1, "out of range");
}

TEST(Tokenizer, PrintablePieceRules) {
    using llamacl::printable_piece;
    EXPECT_EQ(printable_piece(""), "");
    EXPECT_EQ(printable_piece("a"), "a");
    EXPECT_EQ(printable_piece(" "), " ");
    EXPECT_EQ(printable_piece("\n"), "\n");
    EXPECT_EQ(printable_piece("\t"), "\t");
    EXPECT_EQ(printable_piece("hello"), "hello");
    // Lone control bytes are dropped.
    EXPECT_EQ(printable_piece("\x01"), "");
    EXPECT_EQ(printable_piece("\x1b"), "");
    EXPECT_EQ(printable_piece("\x7f"), "");
    // Lone high bytes are dropped too (PieceWriter reassembles the ones that form a character).
    EXPECT_EQ(printable_piece("\x80"), "");
    EXPECT_EQ(printable_piece("\xE2"), "");
    EXPECT_EQ(printable_piece("\xFF"), "");
    // Longer pieces are printed whatever they hold, like printf("%s"), up to a NUL.
    EXPECT_EQ(printable_piece("\x01\x02"), "\x01\x02");
    EXPECT_EQ(printable_piece(std::string_view("\0", 1)), "");
    EXPECT_EQ(printable_piece(std::string_view("ab\0c", 4)), "ab");
    EXPECT_EQ(printable_piece(std::string_view("\x01\0c", 3)), "");
}

TEST(Tokenizer, SplitUtf8RoundTripsThroughDecodeAndPrint) {
    TempDir dir;
    const auto t = Tokenizer::load(write_tokenizer(dir, llama_layout({{" "}})), 0);
    const std::string text = "\xE2\x82\xAC\xF0\x9F\x98\x80";  // U+20AC U+1F600
    const std::vector<int> ids = t.encode(text, true, false);
    ASSERT_EQ(ids.size(), 9u);  // BOS, dummy prefix, 7 byte tokens
    std::string printed;
    llamacl::PieceWriter writer;
    for (std::size_t i = 1; i < ids.size(); i++) printed += writer.push(t.decode(ids[i - 1], ids[i]), true);
    // The dummy prefix right after BOS decodes to nothing; the byte tokens reassemble both characters.
    EXPECT_EQ(printed, text);
}

TEST(Tokenizer, PieceWriterDropsWhatRunCDropsUnlessItCompletesACharacter) {
    llamacl::PieceWriter w;
    const auto feed = [&w](std::initializer_list<std::string_view> pieces) {
        std::string out;
        for (std::string_view p : pieces) out += w.push(p, /*from_prompt=*/true);
        return out;
    };
    EXPECT_EQ(feed({"a", "\xC3", "\xA9", "b"}), "a\xC3\xA9" "b");      // é from two byte tokens
    EXPECT_EQ(feed({"\xD5", "|", "x"}), "|x");                          // a lead byte cut short: dropped
    EXPECT_EQ(feed({"\xA9", "\xBF"}), "");                              // stray continuation bytes
    EXPECT_EQ(feed({"\xE2", "\x80", "z"}), "z");                         // unfinished 3-byte character
    EXPECT_EQ(feed({"\xE0", "\x80", "\x80"}), "");                      // overlong form
    EXPECT_EQ(feed({"\xED", "\xA0", "\x80"}), "");                      // surrogate
    EXPECT_EQ(feed({"\xF4", "\x90", "\x80", "\x80"}), "");             // above U+10FFFF
    EXPECT_EQ(feed({"\xF0", "\x9F", "\xA6", "\x99"}), "\xF0\x9F\xA6\x99");  // U+1F999 llama
    EXPECT_EQ(feed({"\xC3", "\xC3", "\xA9"}), "\xC3\xA9");             // a new lead restarts
    EXPECT_EQ(feed({"\x01", "\n"}), "\n");                             // control bytes as run.c
    // Sampled tokens print exactly what run.c prints: lone high bytes are dropped even when valid.
    EXPECT_EQ(std::string(w.push("\xC3", false)) + std::string(w.push("\xA9", false)), "");
    EXPECT_EQ(w.push("\xC3", true), "");
    EXPECT_EQ(w.push("\xA9", false), "");  // a prompt character finished by a sampled byte: dropped
}

TEST(TokenizerLoad, MissingFile) {
    TempDir dir;
    const auto path = (dir / "nope.bin").string();
    expect_error([&] { Tokenizer::load(path, 0); }, path, "not found");
}

TEST(TokenizerLoad, Directory) {
    TempDir dir;
    const auto path = dir.path().string();
    expect_error([&] { Tokenizer::load(path, 0); }, path, "directory");
}

TEST(TokenizerLoad, EmptyFile) {
    TempDir dir;
    const auto path = write_file(dir, "empty.bin", "");
    expect_error([&] { Tokenizer::load(path, 0); }, path, "truncated");
}

TEST(TokenizerLoad, TruncatedEntry) {
    TempDir dir;
    const std::string good = tokenizer_bytes({{"<unk>"}, {"hello"}, {"world"}});
    // Cut inside the last piece, inside its length field and inside its score.
    for (const std::size_t cut : {good.size() - 2, good.size() - 5 - 2, good.size() - 5 - 4 - 1}) {
        SCOPED_TRACE("cut at " + std::to_string(cut));
        const auto path = write_file(dir, "cut" + std::to_string(cut) + ".bin", good.substr(0, cut));
        expect_error([&] { Tokenizer::load(path, 0); }, path, "truncated");
    }
    // The untruncated file loads.
    EXPECT_EQ(Tokenizer::load(write_file(dir, "good.bin", good), 3).size(), 3);
}

TEST(TokenizerLoad, LengthBeyondTheFileIsTruncation) {
    TempDir dir;
    std::string bytes;
    put_i32(bytes, 1 << 16);
    put_f32(bytes, 0.0f);
    put_i32(bytes, 60000);  // within max_token_length, far beyond the file
    bytes += "abc";
    const auto path = write_file(dir, "short.bin", bytes);
    expect_error([&] { Tokenizer::load(path, 0); }, path, "truncated");
}

TEST(TokenizerLoad, NegativeLength) {
    TempDir dir;
    std::string bytes = tokenizer_bytes({{"a"}});
    put_f32(bytes, 0.0f);
    put_i32(bytes, -5);
    bytes += "abcde";
    const auto path = write_file(dir, "neg.bin", bytes);
    expect_error([&] { Tokenizer::load(path, 0); }, path, "length -5");
}

TEST(TokenizerLoad, LengthAboveMaxTokenLength) {
    TempDir dir;
    const auto path = write_file(dir, "long.bin", tokenizer_bytes({{"a"}, {"abcd"}}, 3));
    expect_error([&] { Tokenizer::load(path, 0); }, path, "length 4");
}

TEST(TokenizerLoad, BadMaxTokenLength) {
    TempDir dir;
    for (const std::int32_t max_len : {0, -1, 1 << 30}) {
        SCOPED_TRACE(max_len);
        const auto path = write_file(dir, "max.bin", tokenizer_bytes({{"a"}}, max_len));
        expect_error([&] { Tokenizer::load(path, 0); }, path, "max_token_length");
    }
}

TEST(TokenizerLoad, NoEntries) {
    TempDir dir;
    const auto path = write_file(dir, "none.bin", tokenizer_bytes({}, 8));
    expect_error([&] { Tokenizer::load(path, 0); }, path, "no entries");
}

TEST(TokenizerLoad, FewerEntriesThanTheModelVocabulary) {
    TempDir dir;
    const auto path = write_tokenizer(dir, {{" "}, {"a"}, {"b"}});
    expect_error([&] { Tokenizer::load(path, 4); }, path,
                 "the tokenizer has 3 entries but the model's vocabulary is 4 tokens; pass the model's own "
                 "tokenizer with -z");
    EXPECT_EQ(Tokenizer::load(path, 3).size(), 3);
    EXPECT_EQ(Tokenizer::load(path, 2).size(), 3);  // more entries than the model needs loads
}

// A command's tokenizer fits its model entry for entry; more entries only where the command allows them.
TEST(TokenizerLoad, ACommandsTokenizerHasExactlyTheModelsVocabulary) {
    TempDir dir;
    const auto path = write_tokenizer(dir, {{" "}, {"a"}, {"b"}});
    expect_error([&] { Tokenizer::for_model(path, path, true, 2, llamacl::VocabFit::exact); }, path,
                 "the tokenizer has 3 entries but the model's vocabulary is 2 tokens; pass the model's own "
                 "tokenizer with -z, or --allow-vocab-mismatch to run with this one as run.c does");
    EXPECT_EQ(Tokenizer::for_model(path, path, true, 3, llamacl::VocabFit::exact).size(), 3);
    EXPECT_EQ(Tokenizer::for_model(path, path, true, 2, llamacl::VocabFit::at_least).size(), 3);
    expect_error([&] { Tokenizer::for_model(path, path, true, 4, llamacl::VocabFit::at_least); }, path, "entries");
}

// ---- The shared tokenizers against run.c's recorded output ----

std::vector<std::string> read_lines(const std::filesystem::path& path) {
    std::istringstream in(llamacl::test::read_file(path));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

Ids parse_ids(const std::string& line) {
    std::istringstream in(line);
    Ids ids;
    for (int id; in >> id;) ids.push_back(id);
    return ids;
}

std::string join(const Ids& ids) {
    std::string s;
    for (const int id : ids) {
        if (!s.empty()) s += ' ';
        s += std::to_string(id);
    }
    return s;
}

class TokenizerReference : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(TokenizerReference, EncodesPromptsLikeRunC) {
    LLAMACL_REQUIRE_SHARED(shared);
    const auto [name, vocab] = GetParam();
    const auto t = Tokenizer::load((shared / "models" / name).string(), vocab);
    ASSERT_EQ(t.size(), vocab);
    const auto prompts = read_lines(shared / "reference" / "tokenizer" / "prompts.txt");
    const auto expected =
        read_lines(shared / "reference" / "tokenizer" / ("ids-" + name + ".txt"));
    ASSERT_FALSE(prompts.empty());
    ASSERT_EQ(prompts.size(), expected.size());
    for (std::size_t i = 0; i < prompts.size(); i++) {
        SCOPED_TRACE("prompts.txt line " + std::to_string(i + 1) + ": \"" + prompts[i] + "\"");
        const Ids want = parse_ids(expected[i]);
        ASSERT_FALSE(want.empty());
        EXPECT_EQ(join(t.encode(prompts[i], true, false)), join(want));
    }
}

// Decoding the ids of a prompt and printing them must give back the prompt (plus nothing else):
// run.c's decode strips the dummy prefix after BOS.
TEST_P(TokenizerReference, DecodesPromptsBack) {
    LLAMACL_REQUIRE_SHARED(shared);
    const auto [name, vocab] = GetParam();
    const auto t = Tokenizer::load((shared / "models" / name).string(), vocab);
    for (const auto& prompt : read_lines(shared / "reference" / "tokenizer" / "prompts.txt")) {
        SCOPED_TRACE(prompt);
        std::string printed;
        llamacl::PieceWriter writer;
        int prev = -1;
        for (const int id : t.encode(prompt, true, false)) {
            if (prev != -1) printed += writer.push(t.decode(prev, id), /*from_prompt=*/true);
            prev = id;
        }
        EXPECT_EQ(printed, prompt);
    }
}

// The prefix starts with "Tokenizer" so that --gtest_filter='Tokenizer*' selects these too.
INSTANTIATE_TEST_SUITE_P(TokenizerShared, TokenizerReference,
                         ::testing::Values(std::make_pair(std::string("tokenizer.bin"), 32000),
                                           std::make_pair(std::string("tok512.bin"), 512)),
                         [](const ::testing::TestParamInfo<std::pair<std::string, int>>& param) {
                             return param.param.first == "tok512.bin" ? "tok512" : "llama2";
                         });

}  // namespace
