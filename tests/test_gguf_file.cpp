// The GGUF container parser: the shared llama.cpp files, images built here, and one malformed image per
// validation rule, each refused with one line naming the file and the key or tensor at fault.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf_builder.hpp"
#include "llamacl/error.hpp"
#include "llamacl/gguf_file.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;
namespace fs = std::filesystem;

namespace {

constexpr std::uint32_t kF32 = 0, kQ4_0 = 2, kQ8_0 = 8;

// A small valid file: metadata of several types, a string array and two tensors.
GgufBuilder small_file() {
    GgufBuilder b;
    b.string("general.architecture", "llama")
        .u32("llama.block_count", 2)
        .f32("llama.rope.freq_base", 10000.0f)
        .boolean("tokenizer.ggml.add_bos_token", true)
        .strings("tokenizer.ggml.tokens", {"a", "bc", ""})
        .array<float>("tokenizer.ggml.scores", GgufType::f32, {1.0f, -2.5f, 3.0f})
        .tensor("a.weight", kF32, {4, 2}, 32)
        .tensor("b.weight", kQ8_0, {32}, 34);
    return b;
}

std::shared_ptr<const std::vector<std::byte>> shared(const GgufBytes& bytes) {
    return std::make_shared<const std::vector<std::byte>>(bytes);
}

// The message parsing `bytes` as "bad.gguf" throws, or "(accepted)".
std::string error_of(const GgufBytes& bytes) {
    try {
        GgufFile::parse(shared(bytes), "bad.gguf");
    } catch (const Error& e) {
        return e.what();
    }
    return "(accepted)";
}

// The image is refused with one line naming the file and containing every fragment.
void expect_refused(const GgufBytes& bytes, std::initializer_list<std::string> fragments) {
    const std::string message = error_of(bytes);
    EXPECT_EQ(message.rfind("bad.gguf: ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

std::string accessor_error(const std::function<void()>& call) {
    try {
        call();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

// ---- images built here ----

TEST(GgufFile, ParsesBuiltImage) {
    const GgufBuilder b = small_file();
    const auto image = b.image();
    const GgufFile f = GgufFile::parse(image, "small.gguf");
    EXPECT_EQ(f.path(), "small.gguf");
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    ASSERT_EQ(f.metadata().size(), 6u);
    EXPECT_EQ(f.metadata()[0].first, "general.architecture");
    EXPECT_EQ(f.metadata()[5].first, "tokenizer.ggml.scores");
    EXPECT_EQ(f.string("general.architecture"), "llama");
    EXPECT_EQ(f.integer("llama.block_count"), 2);
    EXPECT_EQ(f.number("llama.block_count"), 2.0);
    EXPECT_EQ(f.number("llama.rope.freq_base"), 10000.0);
    EXPECT_EQ(f.boolean("tokenizer.ggml.add_bos_token"), true);
    EXPECT_EQ(f.find("absent.key"), nullptr);
    EXPECT_EQ(f.integer("absent.key"), std::nullopt);
    EXPECT_EQ(f.string("absent.key"), std::nullopt);
    EXPECT_EQ(f.array("absent.key", GgufType::string), nullptr);

    const GgufValue* tokens = f.array("tokenizer.ggml.tokens", GgufType::string);
    ASSERT_NE(tokens, nullptr);
    ASSERT_EQ(tokens->count, 3u);
    EXPECT_EQ(tokens->string_at(0), "a");
    EXPECT_EQ(tokens->string_at(1), "bc");
    EXPECT_EQ(tokens->string_at(2), "");
    EXPECT_EQ(tokens->bytes, 3 * 8 + 3u);
    EXPECT_THROW(tokens->string_at(3), std::out_of_range);
    const GgufValue* scores = f.array("tokenizer.ggml.scores", GgufType::f32);
    ASSERT_NE(scores, nullptr);
    ASSERT_EQ(scores->count, 3u);
    ASSERT_EQ(scores->bytes, 12u);
    float s[3];
    std::memcpy(s, scores->data, sizeof s);
    EXPECT_EQ(s[1], -2.5f);

    ASSERT_EQ(f.tensors().size(), 2u);
    const GgufTensor* a = f.tensor("a.weight");
    const GgufTensor* q = f.tensor("b.weight");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(f.tensor("c.weight"), nullptr);
    EXPECT_EQ(a->dims, (std::vector<std::uint64_t>{4, 2}));
    EXPECT_EQ(a->type, kF32);
    EXPECT_EQ(a->offset, 0u);
    EXPECT_EQ(a->bytes, 32u);
    EXPECT_EQ(a->elements(), 8u);
    EXPECT_EQ(a->rows(), 2u);
    EXPECT_EQ(q->type, kQ8_0);
    EXPECT_EQ(q->offset, 32u);
    EXPECT_EQ(q->bytes, 34u);
    EXPECT_EQ(q->rows(), 1u);
    // The views are the builder's bytes, in place.
    const std::byte* start = image->data() + b.data_start();
    EXPECT_EQ(a->data, start);
    EXPECT_EQ(q->data, start + 32);
    EXPECT_EQ(std::memcmp(q->data, b.build().data() + b.data_start() + 32, 34), 0);
    EXPECT_EQ(q->data + q->bytes, image->data() + image->size());
}

TEST(GgufFile, EveryScalarType) {
    GgufBuilder b;
    b.u8("t.u8", 250).i8("t.i8", -5).u16("t.u16", 65000).i16("t.i16", -30000).u32("t.u32", 4000000000u)
        .i32("t.i32", -2000000000).u64("t.u64", 1ull << 40).i64("t.i64", -(1ll << 50)).f32("t.f32", 0.5f)
        .f64("t.f64", -0.25).boolean("t.false", false).boolean("t.true", true).string("t.empty", "");
    const GgufFile f = b.parse();
    EXPECT_EQ(f.integer("t.u8"), 250);
    EXPECT_EQ(f.integer("t.i8"), -5);
    EXPECT_EQ(f.integer("t.u16"), 65000);
    EXPECT_EQ(f.integer("t.i16"), -30000);
    EXPECT_EQ(f.integer("t.u32"), 4000000000ll);
    EXPECT_EQ(f.integer("t.i32"), -2000000000);
    EXPECT_EQ(f.integer("t.u64"), 1ll << 40);
    EXPECT_EQ(f.integer("t.i64"), -(1ll << 50));
    EXPECT_EQ(f.number("t.i8"), -5.0);
    EXPECT_EQ(f.number("t.f32"), 0.5);
    EXPECT_EQ(f.number("t.f64"), -0.25);
    EXPECT_EQ(f.boolean("t.false"), false);
    EXPECT_EQ(f.boolean("t.true"), true);
    EXPECT_EQ(f.string("t.empty"), "");
    EXPECT_EQ(f.find("t.u16")->type, GgufType::u16);
    EXPECT_EQ(f.find("t.u16")->bytes, 2u);
    EXPECT_EQ(f.tensors().size(), 0u);
}

TEST(GgufFile, Version2Parses) {
    GgufBuilder b = small_file();
    b.version(2);
    const GgufFile f = b.parse();
    EXPECT_EQ(f.version(), 2u);
    EXPECT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.integer("llama.block_count"), 2);
}

TEST(GgufFile, AlignmentKeySetsTheLayout) {
    GgufBuilder b;
    b.alignment(64).string("general.name", "x").tensor("a", kF32, {3}, 12).tensor("b", kF32, {5}, 20);
    const auto image = b.image();
    const GgufFile f = GgufFile::parse(image, "aligned.gguf");
    EXPECT_EQ(f.alignment(), 64u);
    EXPECT_EQ(b.data_start() % 64, 0u);
    EXPECT_EQ(f.tensor("a")->data, image->data() + b.data_start());
    EXPECT_EQ(f.tensor("b")->offset, 64u);
    EXPECT_EQ(f.tensor("b")->data, image->data() + b.data_start() + 64);
}

TEST(GgufFile, MetadataOnlyFileNeedsNoPadding) {
    // Vocabulary-only files end at their last value, short of the alignment.
    GgufBuilder b;
    b.string("general.name", "vocab");
    GgufBytes bytes = b.build();
    ASSERT_NE(bytes.size() % 32, 0u);
    const GgufFile f = GgufFile::parse(shared(bytes), "vocab.gguf");
    EXPECT_EQ(f.string("general.name"), "vocab");
    EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufFile, HasMagic) {
    const GgufBytes image = small_file().build();
    EXPECT_TRUE(GgufFile::has_magic(std::span(image).first(4)));
    EXPECT_FALSE(GgufFile::has_magic(std::span(image).first(3)));
    EXPECT_FALSE(GgufFile::has_magic(bytes_of("GGUX")));
    EXPECT_FALSE(GgufFile::has_magic(bytes_of("ggjt")));
}

// ---- typed accessors ----

TEST(GgufAccessors, WrongTypeNamesKeyAndBothTypes) {
    GgufBuilder b;
    b.string("general.name", "x").u32("llama.block_count", 2).u8("small", 1).boolean("flag", true)
        .strings("tokenizer.ggml.tokens", {"a"});
    const GgufFile f = b.parse("acc.gguf");
    const auto check = [](const std::string& message, std::initializer_list<std::string> fragments) {
        EXPECT_EQ(message.rfind("acc.gguf: ", 0), 0u) << message;
        for (const std::string& s : fragments) EXPECT_NE(message.find(s), std::string::npos) << "'" << s << "' not in: " << message;
    };
    check(accessor_error([&] { f.integer("general.name"); }), {"'general.name'", "string", "integer"});
    check(accessor_error([&] { f.string("llama.block_count"); }), {"'llama.block_count'", "u32", "expected string"});
    check(accessor_error([&] { f.boolean("small"); }), {"'small'", "u8", "expected bool"});
    check(accessor_error([&] { f.number("general.name"); }), {"'general.name'", "string", "number"});
    check(accessor_error([&] { f.integer("flag"); }), {"'flag'", "bool", "integer"});
    check(accessor_error([&] { f.array("tokenizer.ggml.tokens", GgufType::f32); }),
          {"'tokenizer.ggml.tokens'", "array of string", "expected array of f32"});
    check(accessor_error([&] { f.array("llama.block_count", GgufType::u32); }),
          {"'llama.block_count'", "has type u32", "expected array of u32"});
    // bool reads only as bool; the value's own integer() agrees.
    EXPECT_EQ(f.find("flag")->integer(), std::nullopt);
    EXPECT_EQ(f.find("general.name")->number(), std::nullopt);
}

TEST(GgufAccessors, U64AboveInt64MaxIsRefused) {
    GgufBuilder b;
    b.u64("big", std::numeric_limits<std::uint64_t>::max()).u64("fits", 1ull << 62);
    const GgufFile f = b.parse("acc.gguf");
    const std::string message = accessor_error([&] { f.integer("big"); });
    EXPECT_NE(message.find("'big'"), std::string::npos) << message;
    EXPECT_NE(message.find("18446744073709551615"), std::string::npos) << message;
    EXPECT_EQ(f.integer("fits"), 1ll << 62);
    EXPECT_EQ(f.number("big"), 18446744073709551615.0);
    EXPECT_EQ(f.find("big")->integer(), std::nullopt);
}

// ---- open() on files ----

TEST(GgufOpen, MapsAFile) {
    TempDir dir;
    const GgufBuilder b = small_file();
    b.write(dir / "m.gguf");
    const std::string path = (dir / "m.gguf").string();
    const GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.path(), path);
    EXPECT_EQ(f.tensors().size(), 2u);
    const GgufBytes bytes = b.build();
    EXPECT_EQ(std::memcmp(f.tensor("b.weight")->data, bytes.data() + b.data_start() + 32, 34), 0);
    // The views outlive the file object they came from through a copy.
    const GgufFile copy = f;
    EXPECT_EQ(copy.array("tokenizer.ggml.tokens", GgufType::string)->string_at(1), "bc");
}

TEST(GgufOpen, RefusesMissingDirectoryAndEmpty) {
    TempDir dir;
    const auto message = [](const std::string& path) { return accessor_error([&] { GgufFile::open(path); }); };
    const std::string missing = (dir / "missing.gguf").string();
    EXPECT_EQ(message(missing).rfind(missing + ": cannot open", 0), 0u) << message(missing);
    EXPECT_EQ(message(dir.path().string()).rfind(dir.path().string() + ": not a regular file", 0), 0u);
    GgufBuilder::write_file(dir / "empty.gguf", {});
    const std::string empty = (dir / "empty.gguf").string();
    EXPECT_EQ(message(empty).rfind(empty + ": not a GGUF file", 0), 0u) << message(empty);
}

// ---- the shared llama.cpp files ----

TEST(GgufShared, EveryFileParses) {
    LLAMACL_REQUIRE_SHARED(dir);
    int files = 0;
    for (const auto& entry : fs::directory_iterator(dir / "models" / "gguf")) {
        if (entry.path().extension() != ".gguf") continue;
        ++files;
        SCOPED_TRACE(entry.path().string());
        const GgufFile f = GgufFile::open(entry.path().string());
        EXPECT_EQ(f.version(), 3u);
        EXPECT_EQ(f.alignment(), 32u);
        EXPECT_TRUE(f.string("general.architecture").has_value());
        const std::uint64_t size = fs::file_size(entry.path());
        const std::byte* lowest = nullptr;
        const std::byte* highest = nullptr;
        for (const GgufTensor& t : f.tensors()) {
            if (!lowest || t.data < lowest) lowest = t.data;
            if (!highest || t.data + t.bytes > highest) highest = t.data + t.bytes;
        }
        if (lowest) {
            EXPECT_LE(static_cast<std::uint64_t>(highest - lowest), size);
        }
        for (const auto& [key, value] : f.metadata()) {
            if (value.type == GgufType::array && value.element_type == GgufType::string && value.count > 0) {
                EXPECT_LE(value.string_at(value.count - 1).size(), size) << key;
            }
        }
        const bool vocab_only = entry.path().filename().string().starts_with("ggml-vocab");
        EXPECT_EQ(f.tensors().empty(), vocab_only);
    }
    EXPECT_GE(files, 10);
}

TEST(GgufShared, Stories260K) {
    LLAMACL_REQUIRE_SHARED(dir);
    const GgufFile f = GgufFile::open((dir / "models/gguf/stories260K-f32.gguf").string());
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.tensors().size(), 48u);
    EXPECT_EQ(f.integer("llama.embedding_length"), 64);
    EXPECT_EQ(f.integer("llama.block_count"), 5);
    EXPECT_EQ(f.string("tokenizer.ggml.model"), "llama");
    EXPECT_NEAR(*f.number("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
    const GgufTensor* emb = f.tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->dims, (std::vector<std::uint64_t>{64, 512}));
    EXPECT_EQ(emb->type, kF32);
    EXPECT_EQ(emb->bytes, 64u * 512 * 4);
    EXPECT_EQ(emb->rows(), 512u);
    const GgufValue* tokens = f.array("tokenizer.ggml.tokens", GgufType::string);
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->count, 512u);
    EXPECT_EQ(tokens->string_at(0), "<unk>");
}

TEST(GgufShared, L3TinyQ4_0Types) {
    LLAMACL_REQUIRE_SHARED(dir);
    const GgufFile f = GgufFile::open((dir / "models/gguf/l3-tiny-q4_0.gguf").string());
    ASSERT_NE(f.tensor("token_embd.weight"), nullptr);
    EXPECT_EQ(f.tensor("token_embd.weight")->type, kQ8_0);
    EXPECT_EQ(f.tensor("token_embd.weight")->bytes, 50262u / 1 * 64 / 32 * 34);
    ASSERT_NE(f.tensor("blk.0.attn_q.weight"), nullptr);
    EXPECT_EQ(f.tensor("blk.0.attn_q.weight")->type, kQ4_0);
    EXPECT_EQ(f.tensor("blk.0.attn_q.weight")->bytes, 64u * 64 / 32 * 18);
    EXPECT_EQ(f.tensor("output.weight"), nullptr);  // tied embeddings
    EXPECT_EQ(f.integer("tokenizer.ggml.bos_token_id"), 50257);
}

TEST(GgufShared, VocabGpt2Merges) {
    LLAMACL_REQUIRE_SHARED(dir);
    const GgufFile f = GgufFile::open((dir / "models/gguf/ggml-vocab-gpt-2.gguf").string());
    EXPECT_EQ(f.tensors().size(), 0u);
    const GgufValue* merges = f.array("tokenizer.ggml.merges", GgufType::string);
    ASSERT_NE(merges, nullptr);
    EXPECT_EQ(merges->count, 50000u);
    EXPECT_EQ(merges->string_at(0), "\xc4\xa0 t");  // "Ġ t"
    EXPECT_EQ(f.array("tokenizer.ggml.tokens", GgufType::string)->count, 50257u);
    EXPECT_EQ(f.array("tokenizer.ggml.token_type", GgufType::i32)->count, 50257u);
}

// ---- malformed images, one per rule ----

TEST(GgufMalformed, BadMagic) {
    GgufBytes bytes = small_file().build();
    bytes[3] = std::byte{'X'};
    expect_refused(bytes, {"not a GGUF file", "\"GGUF\""});
    expect_refused(bytes_of("GGU"), {"not a GGUF file", "too short"});
    expect_refused({}, {"not a GGUF file"});
}

TEST(GgufMalformed, Versions1And4) {
    GgufBuilder b = small_file();
    expect_refused(b.version(1).build(), {"version 1", "only versions 2 and 3", "llama.cpp"});
    expect_refused(b.version(4).build(), {"version 4", "only versions 2 and 3"});
    expect_refused(b.version(0).build(), {"version 0"});
    expect_refused(b.version(0x03000000).build(), {"big-endian"});
}

TEST(GgufMalformed, EveryPrefixThrows) {
    const GgufBytes full = small_file().build();
    ASSERT_NO_THROW(GgufFile::parse(shared(full), "bad.gguf"));
    for (std::size_t n = 0; n < full.size(); ++n) {
        const GgufBytes prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
        const std::string message = error_of(prefix);
        ASSERT_EQ(message.rfind("bad.gguf: ", 0), 0u) << "prefix of " << n << " bytes: " << message;
        ASSERT_EQ(message.find('\n'), std::string::npos) << message;
    }
}

TEST(GgufMalformed, StringPastEnd) {
    GgufBuilder b;
    b.u32("a.b", 1).raw("general.name", GgufType::string, le<std::uint64_t>(1000) + bytes_of("abc"));
    expect_refused(b.build(), {"truncated", "'general.name'", "1000 bytes"});
    // A key's own length.
    GgufBytes bytes = GgufBuilder().u32("a.b", 1).build();
    put<std::uint64_t>(bytes, 24, std::uint64_t{1} << 62);
    expect_refused(bytes, {"truncated", "the key of metadata entry 0"});
    // A string array's element.
    expect_refused(GgufBuilder().raw("tokenizer.ggml.tokens", GgufType::array,
                                     le<std::uint32_t>(8) + le<std::uint64_t>(2) + gguf_string("ok") +
                                         le<std::uint64_t>(50) + bytes_of("short") + GgufBytes(16))
                       .build(),
                   {"truncated", "element 1 of key 'tokenizer.ggml.tokens'"});
}

TEST(GgufMalformed, HugeArrayCountsAllocateNothing) {
    const std::uint64_t huge = std::uint64_t{1} << 60;
    expect_refused(GgufBuilder().raw("tokenizer.ggml.scores", GgufType::array,
                                     le<std::uint32_t>(6) + le<std::uint64_t>(huge) + GgufBytes(64)).build(),
                   {"truncated", "'tokenizer.ggml.scores'", "1152921504606846976", "f32"});
    expect_refused(GgufBuilder().raw("tokenizer.ggml.tokens", GgufType::array,
                                     le<std::uint32_t>(8) + le<std::uint64_t>(huge) + gguf_string("a")).build(),
                   {"truncated", "'tokenizer.ggml.tokens'", "1152921504606846976", "string"});
    // u64 max elements of 8 bytes: no overflow in the size either.
    expect_refused(GgufBuilder().raw("x", GgufType::array,
                                     le<std::uint32_t>(10) + le<std::uint64_t>(~std::uint64_t{0})).build(),
                   {"truncated", "'x'"});
}

TEST(GgufMalformed, HugeEntryCounts) {
    GgufBytes bytes = small_file().build();
    put<std::uint64_t>(bytes, 16, std::uint64_t{1} << 60);
    expect_refused(bytes, {"truncated", "1152921504606846976 metadata entries"});
    bytes = small_file().build();
    put<std::uint64_t>(bytes, 8, std::uint64_t{1} << 60);
    expect_refused(bytes, {"truncated", "1152921504606846976 tensor entries"});
}

TEST(GgufMalformed, UnknownValueType) {
    expect_refused(GgufBuilder().u32("a", 1).raw("odd.key", 13u, le<std::uint32_t>(0)).build(),
                   {"'odd.key'", "unknown value type 13"});
    expect_refused(GgufBuilder().raw("odd.array", GgufType::array, le<std::uint32_t>(99) + le<std::uint64_t>(0)).build(),
                   {"'odd.array'", "array of unknown value type 99"});
}

TEST(GgufMalformed, ArrayOfArrays) {
    expect_refused(GgufBuilder().raw("nested", GgufType::array,
                                     le<std::uint32_t>(9) + le<std::uint64_t>(1) + le<std::uint32_t>(4) +
                                         le<std::uint64_t>(0)).build(),
                   {"'nested'", "array of arrays"});
}

TEST(GgufMalformed, DuplicateKey) {
    expect_refused(GgufBuilder().u32("llama.block_count", 1).string("x", "y").u32("llama.block_count", 2).build(),
                   {"duplicate metadata key 'llama.block_count'"});
}

TEST(GgufMalformed, DuplicateTensor) {
    expect_refused(GgufBuilder().tensor("blk.0.w", kF32, {4}, 16).tensor("blk.0.w", kF32, {4}, 16).build(),
                   {"duplicate tensor 'blk.0.w'"});
}

TEST(GgufMalformed, DimensionCounts) {
    expect_refused(GgufBuilder().tensor("t0", kF32, {}, 16).build(), {"tensor 't0'", "0 dimensions", "1 to 4"});
    expect_refused(GgufBuilder().tensor("t5", kF32, {1, 1, 1, 1, 4}, 16).build(),
                   {"tensor 't5'", "5 dimensions", "1 to 4"});
    ASSERT_NO_THROW(GgufBuilder().tensor("t4", kF32, {1, 1, 1, 4}, 16).parse());
}

TEST(GgufMalformed, ZeroDimension) {
    expect_refused(GgufBuilder().tensor("z", kF32, {4, 0}, 16).build(), {"tensor 'z'", "zero dimension", "[4, 0]"});
}

TEST(GgufMalformed, OverflowingDimensions) {
    const std::uint64_t big = std::uint64_t{1} << 32;
    expect_refused(GgufBuilder().tensor("o", kF32, {big, big}, 16).build(), {"tensor 'o'", "overflow"});
    // 2^63 elements fit a u64 but not ggml's int64.
    expect_refused(GgufBuilder().tensor("o", kF32, {std::uint64_t{1} << 62, 2}, 16).build(), {"tensor 'o'", "overflow"});
    // The element count fits; its bytes do not.
    expect_refused(GgufBuilder().tensor("o", kF32, {std::uint64_t{1} << 62}, 16).build(),
                   {"tensor 'o'", "size overflows"});
}

TEST(GgufMalformed, UnknownTensorType) {
    expect_refused(GgufBuilder().tensor("w", 99, {4}, 16).build(), {"tensor 'w'", "unknown ggml type 99"});
}

TEST(GgufMalformed, RowNotWholeBlocks) {
    expect_refused(GgufBuilder().tensor("blk.0.attn_q.weight", kQ4_0, {20, 2}, 36).build(),
                   {"tensor 'blk.0.attn_q.weight'", "Q4_0", "rows of 20", "blocks of 32"});
}

TEST(GgufMalformed, MisalignedOffset) {
    expect_refused(GgufBuilder().tensor("a", kF32, {4}, 16).tensor("b", kF32, {4}, 16, 16).build(),
                   {"tensor 'b'", "offset 16", "alignment 32"});
}

TEST(GgufMalformed, TensorPastTheEnd) {
    GgufBytes bytes = small_file().build();
    bytes.pop_back();
    expect_refused(bytes, {"truncated", "tensor 'b.weight'", "past the end of the data section"});
    // An offset far past the end (no overflow adding its size).
    GgufBuilder far;
    far.tensor("far", kF32, {4}, 16);
    GgufBytes far_bytes = far.build();
    put<std::uint64_t>(far_bytes, far.directory_end() - 8, std::uint64_t{1} << 63);
    expect_refused(far_bytes, {"tensor 'far'", "offset 9223372036854775808", "past the end"});
    // Cut inside the padding before the data section.
    GgufBuilder b = small_file();
    GgufBytes cut = b.build();
    cut.resize(b.directory_end() + 1);
    expect_refused(cut, {"truncated", "tensor 'a.weight'"});
}

TEST(GgufMalformed, OverlappingTensors) {
    expect_refused(GgufBuilder().tensor("first", kF32, {16}, 64, 0).tensor("second", kF32, {8}, 32, 32).build(),
                   {"tensors 'first' and 'second' overlap"});
    // Same offset, listed in either order.
    expect_refused(GgufBuilder().tensor("x", kF32, {8}, 32, 64).tensor("y", kF32, {8}, 32, 64).build(), {"overlap"});
    // Adjacent is fine.
    ASSERT_NO_THROW(GgufBuilder().tensor("x", kF32, {8}, 32, 32).tensor("y", kF32, {8}, 32, 0).parse());
}

TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
    expect_refused(GgufBuilder().u32("general.alignment", 48).build(), {"general.alignment 48", "power of two"});
    expect_refused(GgufBuilder().u32("general.alignment", 0).build(), {"general.alignment 0", "power of two"});
}

TEST(GgufMalformed, AlignmentWrongType) {
    expect_refused(GgufBuilder().u64("general.alignment", 32).build(), {"general.alignment", "type u64", "u32"});
    expect_refused(GgufBuilder().string("general.alignment", "32").build(), {"general.alignment", "type string", "u32"});
}

TEST(GgufMalformed, ControlCharactersInNamesStayOnOneLine) {
    expect_refused(GgufBuilder().u32("bad\nkey", 1).u32("bad\nkey", 2).build(), {"duplicate metadata key 'bad\\nkey'"});
    const std::string long_name(5000, 'n');
    const std::string message = error_of(GgufBuilder().tensor(long_name, 99, {4}, 16).build());
    EXPECT_LT(message.size(), 400u) << message;
}
