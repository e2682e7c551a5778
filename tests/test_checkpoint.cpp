// Checkpoint loading: both formats, and every way a header or file can be wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "llamacl/checkpoint.hpp"
#include "llamacl/error.hpp"
#include "models.hpp"

using namespace llamacl;
using llamacl::test::TempDir;

namespace {

std::vector<char> read_bytes(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::filesystem::path& p, const std::vector<char>& bytes) {
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Opens `path` and returns the error message, failing the test if it opened.
std::string open_error(const std::filesystem::path& path) {
    try {
        Checkpoint::open(path.string());
    } catch (const Error& e) {
        EXPECT_EQ(e.exit_code(), 1);
        return e.what();
    }
    ADD_FAILURE() << "expected " << path << " to be rejected";
    return "";
}

// A v0 file whose 7 header ints are `h` (no tensors).
std::filesystem::path header_only(const TempDir& dir, std::vector<std::int32_t> h) {
    std::vector<char> bytes(h.size() * 4);
    std::memcpy(bytes.data(), h.data(), bytes.size());
    write_bytes(dir / "h.bin", bytes);
    return dir / "h.bin";
}

}  // namespace

TEST(Checkpoint, V0AndV1HoldTheSameWeights) {
    TempDir dir;
    const Config c = test::small_config(2, /*shared=*/false);
    const auto v0 = test::write_model(dir, c, 0, 3, "v0.bin");
    const auto v1 = test::write_model(dir, c, 1, 3, "v1.bin");
    const Checkpoint a = Checkpoint::open(v0.string()), b = Checkpoint::open(v1.string());
    EXPECT_EQ(a.version(), 0);
    EXPECT_EQ(b.version(), 1);
    EXPECT_FALSE(a.config().shared_classifier);
    EXPECT_FALSE(b.config().shared_classifier);
    EXPECT_EQ(a.config().vocab_size, 300);  // the v0 negative vocab_size comes back positive
    const std::size_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    EXPECT_EQ(0, std::memcmp(a.token_embedding(), b.token_embedding(), vocab * dim * 4));
    EXPECT_EQ(0, std::memcmp(a.classifier().f32(), b.classifier().f32(), vocab * dim * 4));
    EXPECT_NE(0, std::memcmp(a.classifier().f32(), a.token_embedding(), vocab * dim * 4));
    EXPECT_EQ(0, std::memcmp(a.rms_final(), b.rms_final(), dim * 4));
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights x = a.layer(l), y = b.layer(l);
        EXPECT_EQ(0, std::memcmp(x.wk.f32(), y.wk.f32(), kv * dim * 4)) << "layer " << l;
        EXPECT_EQ(0, std::memcmp(x.w2.f32(), y.w2.f32(), hidden * dim * 4)) << "layer " << l;
        EXPECT_EQ(0, std::memcmp(x.rms_ffn.f32(), y.rms_ffn.f32(), dim * 4)) << "layer " << l;
    }
    // Layers are distinct slices, not the same pointer.
    EXPECT_NE(0, std::memcmp(a.layer(0).wq.f32(), a.layer(1).wq.f32(), dim * dim * 4));
}

TEST(Checkpoint, SharedClassifierIsTheEmbedding) {
    TempDir dir;
    const Checkpoint ck = Checkpoint::open(test::write_model(dir, test::small_config(), 1).string());
    EXPECT_TRUE(ck.config().shared_classifier);
    EXPECT_EQ(ck.classifier().f32(), ck.token_embedding());
}

TEST(Checkpoint, ModelSizeAccountsForEveryByteOfTheFile) {
    const Config c = test::small_config(2, false);
    const ModelSize size(c);
    const std::uint64_t freq_cis = static_cast<std::uint64_t>(c.seq_len) * c.head_size() * 4;
    EXPECT_EQ(checkpoint_file_bytes(c, 0), 28 + size.weight_bytes() + freq_cis);
    EXPECT_EQ(checkpoint_file_bytes(c, 1), 256 + size.weight_bytes());
    EXPECT_EQ(size.kv_cache_bytes, 2ull * c.n_layers * c.seq_len * c.kv_dim() * 4);
    EXPECT_EQ(size.layer_bytes() * c.n_layers + (2ull * c.vocab_size * c.dim + c.dim) * 4, size.weight_bytes());
}

TEST(Checkpoint, TruncatedAtAnyPointIsRejected) {
    TempDir dir;
    const auto path = test::write_model(dir, test::small_config(), 0);
    const std::vector<char> bytes = read_bytes(path);
    for (std::size_t keep : {std::size_t{0}, std::size_t{5}, std::size_t{28}, bytes.size() / 2, bytes.size() - 1}) {
        write_bytes(dir / "cut.bin", {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep)});
        const std::string msg = open_error(dir / "cut.bin");
        EXPECT_NE(msg.find("cut.bin"), std::string::npos) << msg;
        EXPECT_NE(msg.find("truncated"), std::string::npos) << keep << ": " << msg;
    }
    std::vector<char> longer = bytes;
    longer.push_back(0);
    write_bytes(dir / "long.bin", longer);
    EXPECT_NE(open_error(dir / "long.bin").find("size mismatch"), std::string::npos);
}

TEST(Checkpoint, InconsistentHeadersAreRejected) {
    TempDir dir;
    struct Case {
        std::vector<std::int32_t> header;
        const char* expect;
    };
    const Case cases[] = {
        {{0, 100, 3, 6, 2, 300, 40}, "positive"},
        {{48, 100, -3, 6, 2, 300, 40}, "positive"},
        {{48, 100, 3, 6, 2, 0, 40}, "positive"},
        {{48, 100, 3, 6, 2, INT32_MIN, 40}, "positive"},
        {{50, 100, 3, 6, 2, 300, 40}, "divisible by n_heads"},
        {{48, 100, 3, 6, 4, 300, 40}, "multiple of n_kv_heads"},
        {{48, 100, 3, 6, 12, 300, 40}, "multiple of n_kv_heads"},
        {{45, 100, 3, 5, 5, 300, 40}, "odd"},
        {{48, 100, 3, 6, 2, 1, 40}, "no token 1 (BOS)"},
        {{48, 100, 3, 6, 2, -1, 40}, "no token 1 (BOS)"},
        {{1 << 30, 1 << 30, 1 << 30, 2, 2, 1 << 30, 1 << 30}, "overflow"},
        {{48, 100, 3, 6, 2, 300, 40}, "size mismatch"},
    };
    for (const Case& c : cases) {
        const std::string msg = open_error(header_only(dir, c.header));
        EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
        EXPECT_NE(msg.find("h.bin"), std::string::npos) << msg;
    }
}

// A versioned file whose magic has one byte changed is named as a damaged header, not reported as a legacy
// header with a dim of over a billion.
TEST(Checkpoint, AMagicOneByteOffIsADamagedHeader) {
    TempDir dir;
    const auto path = test::write_model(dir, test::small_config(), 1);
    std::vector<char> bytes = read_bytes(path);
    for (int at : {0, 3}) {
        std::vector<char> damaged = bytes;
        damaged[static_cast<std::size_t>(at)] ^= 0x01;
        write_bytes(dir / "m.bin", damaged);
        const std::string msg = open_error(dir / "m.bin");
        EXPECT_NE(msg.find("m.bin: this is a damaged llama2.c header (magic 0x"), std::string::npos) << msg;
        EXPECT_NE(msg.find("one byte from the 0x616b3432 (\"ak42\")"), std::string::npos) << msg;
    }
    // Two bytes off is no longer taken for llama2.c's magic.
    bytes[0] ^= 0x01;
    bytes[1] ^= 0x01;
    write_bytes(dir / "m.bin", bytes);
    EXPECT_EQ(open_error(dir / "m.bin").find("damaged"), std::string::npos);
}

TEST(Checkpoint, VersionsOtherThanZeroOneAndTwoAreRejected) {
    TempDir dir;
    const auto path = test::write_model(dir, test::small_config(), 1);
    std::vector<char> bytes = read_bytes(path);
    for (std::int32_t version : {3, -1, 0}) {
        std::memcpy(bytes.data() + 4, &version, 4);
        write_bytes(dir / "v.bin", bytes);
        const std::string msg = open_error(dir / "v.bin");
        EXPECT_NE(msg.find("unknown llama2.c checkpoint version"), std::string::npos) << msg;
        EXPECT_NE(msg.find("in its ak42 header"), std::string::npos) << msg;
    }
    std::int32_t one = 1;
    std::memcpy(bytes.data() + 4, &one, 4);
    bytes[8 + 28] = 7;  // the shared-classifier flag is a boolean
    write_bytes(dir / "v.bin", bytes);
    EXPECT_NE(open_error(dir / "v.bin").find("shared-classifier flag"), std::string::npos);
}

TEST(Checkpoint, MissingFilesAndDirectoriesAreRejected) {
    TempDir dir;
    EXPECT_NE(open_error(dir / "absent.bin").find("cannot open"), std::string::npos);
    EXPECT_NE(open_error(dir.path()).find("not a regular file"), std::string::npos);
}
