// Quantized and half-precision weights: runq.c's Q8_0 math, export.py's quantizer and version-2 files,
// f16 conversion, and generation that prints runq.c's text.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "llamacl/checkpoint.hpp"
#include "llamacl/export.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/synthetic.hpp"
#include "models.hpp"
#include "reference_cases.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

std::vector<float> random_vector(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

void append(std::string& out, const void* data, std::size_t bytes) {
    out.append(static_cast<const char*>(data), bytes);
}

// An independent version-2 writer, from export.py's text rather than from llama-cl's code: the header
// packed field by field, then the norms, then every weight as torch does it (max of |w| per group,
// scale = max / 127 in float32, w / scale rounded half to even).
std::string reference_version2(const Checkpoint& ck, int gs) {
    const Config& c = ck.config();
    std::string out;
    const std::int32_t head[] = {0x616b3432, 2, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
                                 c.seq_len};
    append(out, head, sizeof head);
    out.push_back(c.shared_classifier ? '\1' : '\0');
    append(out, &gs, 4);
    out.resize(256, '\0');
    const std::size_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    for (int l = 0; l < c.n_layers; ++l) append(out, ck.layer(l).rms_att.f32(), dim * 4);
    for (int l = 0; l < c.n_layers; ++l) append(out, ck.layer(l).rms_ffn.f32(), dim * 4);
    append(out, ck.rms_final(), dim * 4);
    const auto q80 = [&](const float* w, std::size_t n) {
        std::string values, scales;
        for (std::size_t g = 0; g < n / gs; ++g) {
            float wmax = 0;
            for (int i = 0; i < gs; ++i) wmax = std::max(wmax, std::abs(w[g * gs + i]));
            const float scale = wmax / 127.0f;
            append(scales, &scale, 4);
            for (int i = 0; i < gs; ++i) {
                const float r = std::nearbyint(w[g * gs + i] / scale);
                values.push_back(static_cast<char>(static_cast<std::int8_t>(r)));
            }
        }
        out += values + scales;
    };
    q80(ck.embedding_weights().f32(), vocab * dim);
    const std::pair<WeightTensor LayerWeights::*, std::size_t> matrices[] = {
        {&LayerWeights::wq, dim * dim}, {&LayerWeights::wk, kv * dim},     {&LayerWeights::wv, kv * dim},
        {&LayerWeights::wo, dim * dim}, {&LayerWeights::w1, hidden * dim}, {&LayerWeights::w2, dim * hidden},
        {&LayerWeights::w3, hidden * dim}};
    for (const auto& [tensor, n] : matrices)
        for (int l = 0; l < c.n_layers; ++l) q80((ck.layer(l).*tensor).f32(), n);
    if (!c.shared_classifier) q80(ck.classifier().f32(), vocab * dim);
    return out;
}

std::string model_args(const std::filesystem::path& model, const std::filesystem::path& tok, const std::string& extra) {
    return "generate " + quote(model.string()) + " -z " + quote(tok.string()) + " " + extra;
}

}  // namespace

TEST(Q80Math, ActivationsRoundHalvesAwayFromZeroAsRunqWeightsToEvenAsTorch) {
    // Groups {127, 2.5, -2.5, 3.5} (scale 1, so x / scale is exact and the halves show the rounding) and
    // zeros (scale 0: 0 / 0 quantizes to 0).
    const float x[] = {127.0f, 2.5f, -2.5f, 3.5f, 0.0f, 0.0f, 0.0f, 0.0f};
    const auto quantized = [&](auto quantizer) {
        std::int8_t q[8];
        float s[2];
        quantizer(q, s, x, 8, 4);
        EXPECT_EQ(s[0], 1.0f);
        EXPECT_EQ(s[1], 0.0f);
        return std::vector<int>(q, q + 8);
    };
    EXPECT_EQ(quantized(quantize), (std::vector<int>{127, 3, -3, 4, 0, 0, 0, 0}));      // runq.c's round()
    EXPECT_EQ(quantized(quantize_q80), (std::vector<int>{127, 2, -2, 4, 0, 0, 0, 0}));  // export.py's torch.round
}

TEST(Q80Math, MatmulIsTheGroupedIntegerDotOfItsOperands) {
    const int n = 96, d = 7, gs = 32;
    const WeightFormat type{ElementType::q8_0, gs};
    const auto wf = random_vector(static_cast<std::size_t>(n) * d, 1), xf = random_vector(n, 2);
    std::vector<std::int8_t> wq(wf.size());
    std::vector<float> ws(wf.size() / gs);
    quantize(wq.data(), ws.data(), wf.data(), n * d, gs);
    MatmulInput x(type, n);
    x.set(xf.data());
    std::vector<float> out(d);
    matmul(out.data(), x, WeightTensor{type, wq.data(), ws.data()}, d);
    for (int i = 0; i < d; ++i) {
        // runq.c's sum, group by group, with each group's dot product in exact integers.
        float val = 0.0f;
        for (int g = 0; g < n / gs; ++g) {
            long long dot = 0;
            for (int k = 0; k < gs; ++k) dot += static_cast<long long>(wq[i * n + g * gs + k]) * x.q()[g * gs + k];
            val += static_cast<float>(dot) * ws[i * n / gs + g] * x.scales()[g];
        }
        EXPECT_EQ(out[i], val) << "row " << i;
        // And it approximates the fp32 product within the quantization error.
        double exact = 0;
        for (int j = 0; j < n; ++j) exact += static_cast<double>(wf[i * n + j]) * xf[j];
        EXPECT_NEAR(out[i], exact, 0.05 * std::sqrt(static_cast<double>(n))) << "row " << i;
    }
}

TEST(Q80Math, DequantizeIsValueTimesItsGroupsScale) {
    const std::int8_t q[] = {1, -2, 127, -127, 5, 6};
    const float s[] = {0.5f, 0.25f, 2.0f};
    std::vector<float> out(6);
    dequantize(out.data(), WeightTensor{{ElementType::q8_0, 2}, q, s}, 6);
    EXPECT_EQ(out, (std::vector<float>{0.5f, -1.0f, 31.75f, -31.75f, 10.0f, 12.0f}));
}

TEST(HalfMath, EveryHalfWidensExactlyAndNarrowsBack) {
    for (std::uint32_t h = 0; h <= 0xffff; ++h) {
        const float f = half_to_float(static_cast<std::uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_EQ((h >> 10) & 0x1f, 0x1fu);
            continue;
        }
        ASSERT_EQ(float_to_half(f), h) << std::hex << h;
    }
    EXPECT_EQ(half_to_float(0x3c00), 1.0f);
    EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
    EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
    EXPECT_EQ(half_to_float(0xc000), -2.0f);
}

TEST(HalfMath, NarrowingRoundsToNearestEven) {
    EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);      // a tie, to the even 1.0
    EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);  // a tie, to the even 1 + 2^-9
    EXPECT_EQ(float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
    EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // the tie past the largest half goes to infinity
    EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);  // a tie between 0 and the smallest subnormal
    EXPECT_EQ(float_to_half(0x1p-25f + 0x1p-30f), 0x0001);
    EXPECT_EQ(float_to_half(-0.0f), 0x8000);
    EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into the smallest normal
    EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
}

TEST(Quantize, DefaultGroupSizeIsTheLargestPowerOfTwoUpTo64DividingBothWidths) {
    EXPECT_EQ(default_group_size(Config{64, 172, 1, 1, 1, 2, 1, true}), 4);   // stories260K
    EXPECT_EQ(default_group_size(Config{64, 176, 1, 1, 1, 2, 1, true}), 16);
    EXPECT_EQ(default_group_size(Config{4096, 11008, 1, 1, 1, 2, 1, true}), 64);
    EXPECT_EQ(default_group_size(Config{6, 9, 1, 1, 1, 2, 1, true}), 1);
}

// A tensor of several of encode_weights' slices (threads) is stored as one pass over it stores it, the
// group size (48) not dividing a slice's power of two.
TEST(Quantize, ALargeTensorIsEncodedAsOnePassWould) {
    const std::uint64_t n = (std::uint64_t{1} << 23) + 3 * 48;
    const std::vector<float> w = random_vector(n, 5);
    const WeightFormat q8{ElementType::q8_0, 48};
    std::vector<std::byte> encoded(q8.bytes(n));
    encode_weights(encoded.data(), w.data(), n, q8);
    std::vector<std::int8_t> q(n);
    std::vector<float> scales(n / 48);
    quantize_q80(q.data(), scales.data(), w.data(), n, 48);
    EXPECT_EQ(std::memcmp(encoded.data(), q.data(), n), 0);
    EXPECT_EQ(std::memcmp(encoded.data() + n, scales.data(), scales.size() * sizeof(float)), 0);

    const WeightFormat f16{ElementType::f16, 0};
    encoded.assign(f16.bytes(n), std::byte{0});
    encode_weights(encoded.data(), w.data(), n, f16);
    std::uint64_t mismatches = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        std::uint16_t half = 0;
        std::memcpy(&half, encoded.data() + 2 * i, sizeof half);
        mismatches += half != float_to_half(w[i]);
    }
    EXPECT_EQ(mismatches, 0u);
}

TEST(Quantize, WritesTheBytesOfAnIndependentExportPyWriter) {
    TempDir dir;
    for (const bool shared : {true, false}) {
        for (const int version : {0, 1}) {
            const Config c = small_config(2, shared);
            const auto model = write_model(dir, c, version, 11);
            const Checkpoint fp32 = Checkpoint::open(model.string());
            for (const int gs : {4, 2}) {
                const auto out = dir / "q.bin";  // (replaced each time)
                const CommandResult r = run_llama_cl("quantize " + quote(model.string()) + " " + quote(out.string()) +
                                                     " --force --group-size " + std::to_string(gs));
                ASSERT_EQ(r.exit_code, 0) << r.err;
                EXPECT_EQ(r.out, "");
                EXPECT_EQ(r.err, "wrote " + out.string() + ": llama2.c version 2, q8_0 (group size " +
                                     std::to_string(gs) + ") weights, " +
                                     std::to_string(std::filesystem::file_size(out)) + " bytes\n");
                EXPECT_TRUE(read_file(out) == reference_version2(fp32, gs))
                    << "shared " << shared << " version " << version << " group size " << gs;
                EXPECT_FALSE(std::filesystem::exists(dir / "q.bin.partial"));
            }
        }
    }
}

TEST(Quantize, DefaultGroupSizeAndTheSharedFilesAreExportPysBytes) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    // stories260K.q80.bin and synth-gqa-unshared.q80.bin were written by export.py's procedure from
    // the fp32 files, with group sizes 4 and 16: the defaults for their widths.
    for (const auto& [fp32, q80] : {std::pair{"stories260K.v1.bin", "stories260K.q80.bin"},
                                    {"stories260K.bin", "stories260K.q80.bin"},
                                    {"synth-gqa-unshared.bin", "synth-gqa-unshared.q80.bin"}}) {
        const auto out = dir / "q.bin";  // (replaced each time)
        const CommandResult r = run_llama_cl("quantize " + quote((shared / "models" / fp32).string()) + " " +
                                             quote(out.string()) + " --force");
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_TRUE(read_file(out) == read_file(shared / "models" / q80)) << fp32;
    }
}

TEST(Quantize, BadInputsAreOneLineErrors) {
    TempDir dir;
    const Config c = small_config();  // dim 48, hidden_dim 100
    const auto model = write_model(dir, c, 1);
    const auto out = dir / "q.bin";
    const std::string base = "quantize " + quote(model.string()) + " " + quote(out.string());
    for (const auto& [flags, mention] : {std::pair{"--group-size 8", "--group-size 8: must divide both dim (48) and hidden_dim (100)"},
                                         {"--group-size 0", "--group-size"},
                                         {"--group-size -4", "--group-size"},
                                         {"--group-size x", "--group-size"}}) {
        const CommandResult r = run_llama_cl(base + " " + flags);
        EXPECT_EQ(r.exit_code, 2) << flags;
        EXPECT_NE(r.err.find(mention), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_FALSE(std::filesystem::exists(out)) << flags;
    }
    ASSERT_EQ(run_llama_cl(base).exit_code, 0);
    const CommandResult again = run_llama_cl("quantize " + quote(out.string()) + " " + quote((dir / "qq.bin").string()));
    EXPECT_EQ(again.exit_code, 2);
    EXPECT_NE(again.err.find("holds q8_0 (group size 4) weights"), std::string::npos) << again.err;
    const CommandResult nowhere = run_llama_cl("quantize " + quote(model.string()) + " " + quote((dir / "no/q.bin").string()));
    EXPECT_EQ(nowhere.exit_code, 1);
    EXPECT_NE(nowhere.err.find("cannot create"), std::string::npos) << nowhere.err;

    // The output is renamed into place: never over the input (by its name or a link's), nor over a
    // directory or device, even with --force; each left as it was.
    const std::string before = read_file(model);
    const auto link = dir / "link.bin";
    std::filesystem::create_symlink(model, link);
    for (const std::filesystem::path& target : {model, link}) {
        const CommandResult self =
            run_llama_cl("quantize " + quote(model.string()) + " " + quote(target.string()) + " --force");
        EXPECT_EQ(self.exit_code, 1) << target;
        EXPECT_NE(self.err.find("is the input checkpoint"), std::string::npos) << self.err;
        EXPECT_EQ(std::count(self.err.begin(), self.err.end(), '\n'), 1) << self.err;
    }
    EXPECT_EQ(read_file(model), before);
    EXPECT_TRUE(std::filesystem::is_symlink(link));
    const auto fifo = dir / "fifo";  // (a device of its own: a regression must not replace /dev/null)
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    for (const std::filesystem::path& target : {fifo, fifo.parent_path()}) {
        const CommandResult special = run_llama_cl("quantize " + quote(model.string()) + " " + quote(target.string()));
        EXPECT_EQ(special.exit_code, 1) << target;
        EXPECT_NE(special.err.find("is not a regular file"), std::string::npos) << special.err;
    }
    EXPECT_TRUE(std::filesystem::is_fifo(fifo));

    // Its working file is a new one: neither an input named OUT.partial nor a file a link there names.
    const auto partial_input = dir / "w.partial";
    std::filesystem::copy_file(model, partial_input);
    const CommandResult from_partial =
        run_llama_cl("quantize " + quote(partial_input.string()) + " " + quote((dir / "w").string()));
    EXPECT_EQ(from_partial.exit_code, 0) << from_partial.err;
    EXPECT_EQ(read_file(partial_input), before);
    const auto victim = dir / "victim.txt";
    std::ofstream(victim) << "precious";
    std::filesystem::create_symlink(victim, dir / "z.partial");
    const CommandResult linked = run_llama_cl("quantize " + quote(model.string()) + " " + quote((dir / "z").string()));
    EXPECT_EQ(linked.exit_code, 0) << linked.err;
    EXPECT_EQ(read_file(victim), "precious");
    EXPECT_EQ(read_file(dir / "z"), read_file(dir / "w"));
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
        EXPECT_EQ(entry.path().filename().string().find(".partial."), std::string::npos) << entry.path();
}

TEST(Version2, MapsEachTensorsValuesAndScales) {
    TempDir dir;
    const Config c = small_config(2, false);
    const Checkpoint fp32 = Checkpoint::open(write_model(dir, c, 1).string());
    write_version2(fp32, (dir / "q.bin").string(), 4);
    const Checkpoint q = Checkpoint::open((dir / "q.bin").string());
    EXPECT_EQ(q.version(), 2);
    EXPECT_EQ(q.weight_format(), (WeightFormat{ElementType::q8_0, 4}));
    const ModelSize size(q.config());
    EXPECT_EQ(size.weight_bytes() + 256, std::filesystem::file_size(dir / "q.bin"));
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim();
    // fp32 norms; a byte per weight and a 4-byte scale per group of 4 weights.
    EXPECT_EQ(size.layer_bytes(), 2 * dim * 4 + (2 * dim * dim + 2 * kv * dim + 3 * hidden * dim) * (1 + 4 / 4));
    // A matrix's scales follow its values, and the next layer's values its scales.
    const LayerWeights l0 = q.layer(0), l1 = q.layer(1);
    EXPECT_EQ(static_cast<const void*>(l0.wq.scales), l0.wq.q8() + dim * dim);
    EXPECT_EQ(static_cast<const void*>(l1.wq.q8()), l0.wq.scales + dim * dim / 4);
    // Every tensor holds what quantize_q80 makes of the fp32 weights; the embedding table is dequantized.
    std::vector<std::int8_t> values(hidden * dim);
    std::vector<float> scales(hidden * dim / 4);
    quantize_q80(values.data(), scales.data(), fp32.layer(2).w2.f32(), hidden * dim, 4);
    EXPECT_EQ(0, std::memcmp(values.data(), q.layer(2).w2.q8(), values.size()));
    EXPECT_EQ(0, std::memcmp(scales.data(), q.layer(2).w2.scales, scales.size() * 4));
    std::vector<float> embedding(c.vocab_size * dim);
    dequantize(embedding.data(), q.embedding_weights(), embedding.size());
    EXPECT_EQ(0, std::memcmp(embedding.data(), q.token_embedding(), embedding.size() * 4));
    EXPECT_NE(q.classifier().values, q.embedding_weights().values);  // unshared
    EXPECT_EQ(0, std::memcmp(q.layer(1).rms_ffn.f32(), fp32.layer(1).rms_ffn.f32(), dim * 4));
}

TEST(Version2, InfoPrintsTheFormatGroupSizeAndRealBytes) {
    TempDir dir;
    const Config c = small_config();
    const auto model = write_model(dir, c, 1);
    write_version2(Checkpoint::open(model.string()), (dir / "q.bin").string(), 4);
    const CommandResult r = run_llama_cl("info " + quote((dir / "q.bin").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const ModelSize size(Checkpoint::open((dir / "q.bin").string()).config());
    for (const std::string& expect : {std::string("format: llama2.c version 2 (ak42 export, Q8_0)\n"),
                                      std::string("weights: q8_0 (group size 4)\n"),
                                      "bytes per layer: " + std::to_string(size.layer_bytes()) + " ",
                                      "weight bytes: " + std::to_string(size.weight_bytes()) + " ",
                                      std::string("cpu reference laid-out f32 matrices: none (the weights are not f32)\n")})
        EXPECT_NE(r.out.find(expect), std::string::npos) << expect << "\n" << r.out;
}

TEST(Version2, InfoNeverWidensTheEmbeddingTable) {
    // 2^22 rows of 4: 32 MiB of int8 values and scales, 64 MiB once dequantized (runq.c does at load).
    // (Written by other processes: a child's peak memory counts what this process held when it started.)
    TempDir dir;
    const Config c{4, 4, 1, 1, 1, 1 << 22, 8, true};
    const auto info_of_vocab = [&](int vocab) {
        const std::string name = std::to_string(vocab), fp32 = quote((dir / (name + ".bin")).string()),
                          q80 = quote((dir / (name + ".q80.bin")).string());
        EXPECT_EQ(run_command(quote(LLAMACL_MAKE_CHECKPOINT) + " --dim 4 --hidden-dim 4 --layers 1 --heads 1 --vocab " +
                              name + " --seq-len 8 --version 1 " + fp32)
                      .exit_code,
                  0);
        EXPECT_EQ(run_llama_cl("quantize " + fp32 + " " + q80 + " --group-size 4").exit_code, 0);
        const CommandResult r = run_llama_cl("info " + q80);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return r.peak_rss_kib;
    };
    const long small = info_of_vocab(260), large = info_of_vocab(c.vocab_size);
    EXPECT_LT(large, small + 16 * 1024) << "info read or widened the table: " << large << " KiB against " << small;
    // The first use widens it, exactly.
    const Checkpoint q = Checkpoint::open((dir / "4194304.q80.bin").string());
    std::vector<float> widened(static_cast<std::size_t>(c.vocab_size) * c.dim);
    dequantize(widened.data(), q.embedding_weights(), widened.size());
    EXPECT_EQ(0, std::memcmp(widened.data(), q.token_embedding(), widened.size() * 4));
}

TEST(GenerateQ80, WeightsQ80OnTheFp32FileIsTheQuantizedFile) {
    LLAMACL_REQUIRE_SHARED(shared);
    // --weights q8_0 quantizes as `quantize` does, with the default group size: the same weights as the
    // shared version-2 files, so runq.c's text.
    const std::pair<std::string, std::string> fp32_of[] = {{"stories260K.q80.bin", "stories260K.bin"},
                                                           {"synth-gqa-unshared.q80.bin", "synth-gqa-unshared.bin"}};
    int checked = 0;
    for (ReferenceCase c : load_cases(shared, "cases-q80.tsv")) {
        for (const auto& [q80, fp32] : fp32_of) {
            if (c.model != q80) continue;
            c.model = fp32;
            const CommandResult r = run_llama_cl(generate_args(shared, c, "--backend cpu --weights q8_0"));
            EXPECT_EQ(r.exit_code, 0) << r.err;
            EXPECT_EQ(r.out, read_file(shared / "reference" / c.expected)) << "case " << c.id << " from " << fp32;
            ++checked;
        }
    }
    EXPECT_EQ(checked, 3);
}

TEST(GenerateF16, WeightsF16IsTheFp32ModelOfTheRoundedWeights) {
    // The reference on f16 weights computes fp32 on their exact widening: the text of an fp32 file
    // holding the rounded weights (the norms stay fp32).
    TempDir dir;
    const Config c = small_config(2, false);
    const auto model = write_model(dir, c, 1, 13);
    std::string bytes = read_file(model);
    const std::size_t norms = (2 * c.n_layers + 1) * static_cast<std::size_t>(c.dim);
    for (std::size_t at = 256 + norms * 4; at < bytes.size(); at += 4) {
        float f;
        std::memcpy(&f, bytes.data() + at, 4);
        f = half_to_float(float_to_half(f));
        std::memcpy(bytes.data() + at, &f, 4);
    }
    const auto rounded = dir / "rounded.bin";
    std::ofstream(rounded, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const std::string flags = "-t 0.8 -p 0.9 -s 5 -n 30 -i 'ab' --backend cpu";
    const CommandResult half = run_llama_cl(model_args(model, dir / "tok.bin", flags + " --weights f16"));
    const CommandResult expect = run_llama_cl(model_args(rounded, dir / "tok.bin", flags));
    const CommandResult full = run_llama_cl(model_args(model, dir / "tok.bin", flags + " --weights f32"));
    ASSERT_EQ(half.exit_code, 0) << half.err;
    EXPECT_EQ(half.out, expect.out);
    EXPECT_EQ(full.out, run_llama_cl(model_args(model, dir / "tok.bin", flags)).out);  // f32 is the file's own
    EXPECT_NE(half.out, "");
}

TEST(GenerateQ80, ConvertingAQuantizedFileIsAUsageError) {
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    write_version2(Checkpoint::open(model.string()), (dir / "q.bin").string(), 4);
    const CommandResult r = run_llama_cl(model_args(dir / "q.bin", dir / "tok.bin", "--backend cpu --weights f16"));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("--weights f16: " + (dir / "q.bin").string() + " holds q8_0 (group size 4) weights"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(run_llama_cl(model_args(dir / "q.bin", dir / "tok.bin", "--backend cpu --weights q8_0 -n 3")).exit_code, 0);
}

TEST(GenerateQ80, TheOpenclBackendRefusesGroupsItCannotRead) {
    // The device reads Q8_0 rows a word (4 weights) at a time: a file of groups of 2, and --weights q8_0
    // on a model whose widths only 2 divides, are refused in one line.
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    write_version2(Checkpoint::open(model.string()), (dir / "q.bin").string(), 2);
    TempDir odd_dir;
    const auto odd = write_model(odd_dir, {36, 98, 2, 6, 2, 300, 40, true}, 1);
    for (const auto& [path, tok, flags, mention] :
         {std::tuple{dir / "q.bin", dir / "tok.bin", std::string(""), (dir / "q.bin").string() + ":"},
          std::tuple{odd, odd_dir / "tok.bin", std::string("--weights q8_0"), odd.string() + " (--weights q8_0):"}}) {
        const CommandResult r = run_llama_cl(model_args(path, tok, "--backend opencl -n 4 " + flags));
        EXPECT_EQ(r.exit_code, 1) << flags;
        EXPECT_EQ(r.out, "");
        EXPECT_NE(r.err.find(mention + " the OpenCL backend runs q8_0 weights in groups of a multiple of 4, and these "
                                       "are q8_0 (group size 2)"),
                  std::string::npos)
            << r.err;
        EXPECT_NE(r.err.find("run generate with --backend cpu"), std::string::npos) << r.err;
        // Quantizing again helps only where a multiple of 4 divides both widths: 48 and 100, not 36 and 98.
        EXPECT_EQ(r.err.find("llama-cl quantize --group-size 4") != std::string::npos, flags.empty()) << r.err;
        EXPECT_EQ(r.err.find("no multiple of 4 divides both dim (36) and hidden_dim (98)") != std::string::npos,
                  !flags.empty())
            << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(run_llama_cl(model_args(path, tok, "--backend cpu -n 4 " + flags)).exit_code, 0) << flags;
    }
}

TEST(GenerateQ80, GroupsOfOneLeaveScalesUnalignedAndStillRunOnTheCpu) {
    // dim 6 and hidden_dim 7: only groups of 1 divide both, so a tensor's int8 values (42 of them) leave
    // the scales after them off a float's alignment. runq.c reads them in place; the loader copies them.
    TempDir dir;
    const auto model = write_model(dir, {6, 7, 1, 3, 3, 300, 16, true}, 1);
    const auto q80 = dir / "q.bin";
    const CommandResult quantized = run_llama_cl("quantize " + quote(model.string()) + " " + quote(q80.string()));
    ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
    EXPECT_NE(quantized.err.find("q8_0 (group size 1)"), std::string::npos) << quantized.err;
    const Checkpoint ck = Checkpoint::open(q80.string());
    ASSERT_EQ(ck.weight_format().group_size, 1);
    const WeightTensor& w1 = ck.layer(0).w1;
    for (std::uint64_t i = 0; i < 42; ++i) {
        float scale = 0.0f;  // the file's scales follow its 42 int8 values
        std::memcpy(&scale, w1.q8() + 42 + i * sizeof(float), sizeof scale);
        EXPECT_EQ(w1.scales[i], scale) << i;
    }
    const CommandResult from_file = run_llama_cl(model_args(q80, dir / "tok.bin", "--backend cpu -n 12 -s 3"));
    const CommandResult converted = run_llama_cl(model_args(model, dir / "tok.bin", "--backend cpu -n 12 -s 3 --weights q8_0"));
    ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
    EXPECT_FALSE(from_file.out.empty());
    EXPECT_EQ(from_file.out, converted.out);
}


TEST(BenchWeights, CountTheBytesTheyRead) {
    // The norms stay floats; every matrix element is two bytes (f16), or a byte and, per group, a float
    // scale (q8_0, in the default group size).
    Config c = *preset_config("tiny");
    const int gs = default_group_size(c);
    const std::uint64_t fp32_layer = ModelSize(c).layer_bytes(), norms = 2 * 4 * static_cast<std::uint64_t>(c.dim);
    const std::uint64_t table = static_cast<std::uint64_t>(c.vocab_size) * c.dim;
    const std::pair<WeightFormat, std::uint64_t (*)(std::uint64_t, std::uint64_t)> formats[] = {
        {{ElementType::f16, 0}, [](std::uint64_t n, std::uint64_t) { return 2 * n; }},
        {{ElementType::q8_0, gs}, [](std::uint64_t n, std::uint64_t group) { return n + n / group * 4; }}};
    for (const auto& [format, stored] : formats) {
        SCOPED_TRACE(format.describe());
        const CommandResult r = run_llama_cl(std::string("bench --synthetic tiny --weights ") +
                                             element_name(format.type) + " -n 2 --runs 1 --json");
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j.at("config").at("weights"), element_name(format.type));
        c.weight_format = format;
        const ModelSize size(c);
        EXPECT_EQ(size.layer_bytes(), stored((fp32_layer - norms) / 4, static_cast<std::uint64_t>(gs)) + norms);
        EXPECT_EQ(j.at("bytes_per_token_breakdown").at("layer_weights"), size.layer_bytes() * c.n_layers);
        EXPECT_EQ(j.at("bytes_per_token_breakdown").at("final_norm_and_classifier"),
                  stored(table, static_cast<std::uint64_t>(gs)) + 4 * c.dim);
    }
}
