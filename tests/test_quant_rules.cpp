// A model's own math parameters: ggml's Q8_0 rule (QuantRule::ggml) against a transcription of ggml's
// reference kernels, RoPE's base and frequency factors against their formula, and a model with all of
// them (ggml's Q8_0, base 500000 with factors, epsilon 1e-6) on the device: the exact shape bit for bit
// with the reference, the default CPU shape within Q8_0's tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "llamacl/device_forward.hpp"
#include "llamacl/export.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/synthetic.hpp"
#include "ggml_reference.hpp"
#include "support.hpp"

using namespace llamacl;
using llamacl::test::ggml_q4_0;
using llamacl::test::uniform_floats;

namespace {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }


// ---------------------------------------------------------------------------------------------------
// ggml's reference kernels, transcribed: block_q8_0 (a half scale and 32 int8 values),
// quantize_row_q8_0_ref and the generic ggml_vec_dot_q8_0_q8_0, with the compiler's own half conversion.

constexpr int QK8_0 = 32;
struct BlockQ80 {
    float d;  // the half, widened
    std::int8_t qs[QK8_0];
};

float fp16_round_trip(float f) {
#if defined(__FLT16_MAX__)
    return static_cast<float>(static_cast<_Float16>(f));
#else
    return half_to_float(float_to_half(f));
#endif
}

std::vector<BlockQ80> quantize_row_q8_0_ref(const float* x, int k) {
    std::vector<BlockQ80> y(static_cast<std::size_t>(k / QK8_0));
    for (int i = 0; i < k / QK8_0; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) {
            const float v = std::fabs(x[i * QK8_0 + j]);
            amax = amax > v ? amax : v;  // ggml's MAX
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp16_round_trip(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = static_cast<std::int8_t>(std::roundf(x[i * QK8_0 + j] * id));
    }
    return y;
}

float vec_dot_q8_0_q8_0(int n, const BlockQ80* x, const BlockQ80* y) {
    float sumf = 0;
    for (int ib = 0; ib < n / QK8_0; ++ib) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[ib].qs[j] * y[ib].qs[j];
        sumf += static_cast<float>(sumi) * (x[ib].d * y[ib].d);
    }
    return sumf;
}

// Weights as our Q8_0 tensors hold them: each row's values, then its scales (widened halves).
struct StoredQ80 {
    std::vector<std::int8_t> q;
    std::vector<float> scales;
    std::vector<BlockQ80> blocks;  // ggml's own, for the transcription
};
StoredQ80 stored(const std::vector<float>& w) {
    StoredQ80 s;
    s.blocks = quantize_row_q8_0_ref(w.data(), static_cast<int>(w.size()));
    for (const BlockQ80& b : s.blocks) {
        s.q.insert(s.q.end(), b.qs, b.qs + QK8_0);
        s.scales.push_back(b.d);
    }
    return s;
}

// Inputs whose groups cover what the half scale meets: ordinary values, a group of zeros, groups whose
// scale is a subnormal half (max under 127 x 2^-14) and one whose scale rounds to a half tie.
std::vector<float> awkward_input(int n, unsigned seed) {
    std::vector<float> x = uniform_floats(static_cast<std::size_t>(n), seed, -3.0f, 3.0f);
    for (int g = 0; g < n / QK8_0; g++) {
        float* v = x.data() + g * QK8_0;
        switch (g % 5) {
            case 1: std::fill(v, v + QK8_0, 0.0f); break;
            case 2:
                for (int i = 0; i < QK8_0; i++) v[i] *= 1e-4f;
                break;
            case 3: v[7] = 127.0f * (1.0f + 0x1p-11f); break;  // d = 1 + 2^-11: halfway between two halves
            default: break;
        }
    }
    return x;
}

// Every path of the matmul (the AVX2 blocks of eight rows where the CPU has them, the rows after them one
// by one, a batch of inputs eight at a time and the rest) of `tensor` (d rows of n) against want(row,
// input quantized by quantize_row_q8_0_ref), bit for bit, on `batch` awkward inputs from `seed`.
template <typename Want>
void expect_every_path(const WeightTensor& tensor, int n, int d, int batch, unsigned seed, Want want) {
    std::vector<std::vector<float>> xs;
    std::vector<MatmulInput> inputs(static_cast<std::size_t>(batch), MatmulInput(tensor.format, n));
    for (int b = 0; b < batch; b++) {
        xs.push_back(awkward_input(n, seed + static_cast<unsigned>(b)));
        inputs[static_cast<std::size_t>(b)].set(xs.back().data());
    }
    std::vector<float> together(static_cast<std::size_t>(batch) * d);
    matmuls(inputs, {{together.data(), tensor, d, static_cast<std::size_t>(d)}});
    for (int b = 0; b < batch; b++) {
        const auto xq = quantize_row_q8_0_ref(xs[static_cast<std::size_t>(b)].data(), n);
        std::vector<float> alone(d);
        matmul(alone.data(), inputs[static_cast<std::size_t>(b)], tensor, d);
        for (int r = 0; r < d; r++) {
            const float expected = want(r, xq);
            EXPECT_EQ(bits(alone[r]), bits(expected)) << "n " << n << " input " << b << " row " << r;
            EXPECT_EQ(bits(together[static_cast<std::size_t>(b) * d + r]), bits(expected))
                << "batched: n " << n << " input " << b << " row " << r;
        }
    }
}

}  // namespace


TEST(QuantRules, GgmlInputIsQuantizeRowQ80Ref) {
    const int n = 5 * QK8_0;
    const auto x = awkward_input(n, 3);
    const auto want = quantize_row_q8_0_ref(x.data(), n);
    MatmulInput in(WeightFormat{ElementType::q8_0, QK8_0, QuantRule::ggml}, n);
    in.set(x.data());
    for (int g = 0; g < n / QK8_0; g++) {
        EXPECT_EQ(bits(in.scales()[g]), bits(want[g].d)) << "block " << g;
        for (int j = 0; j < QK8_0; j++)
            EXPECT_EQ(in.q()[g * QK8_0 + j], want[g].qs[j]) << "block " << g << " value " << j;
    }
    // The tie: 1 + 2^-11 rounds to the even half, 1.
    EXPECT_EQ(in.scales()[3], 1.0f);
}

// Every path of the Q8_0 matmul against ggml's vec_dot, bit for bit.
TEST(QuantRules, GgmlMatmulIsVecDotQ80Q80) {
    const WeightFormat ggml{ElementType::q8_0, QK8_0, QuantRule::ggml};
    for (const int n : {QK8_0, 7 * QK8_0}) {
        const int d = 21;
        const StoredQ80 s = stored(uniform_floats(static_cast<std::size_t>(n) * d, 1));
        expect_every_path(WeightTensor{ggml, s.q.data(), s.scales.data()}, n, d, 11, 10,
                          [&](int r, const std::vector<BlockQ80>& xq) {
                              return vec_dot_q8_0_q8_0(n, s.blocks.data() + static_cast<std::size_t>(r) * (n / QK8_0),
                                                       xq.data());
                          });
    }
}

namespace {

// ggml's vec_dot_q4_0_q8_0 on block_q4_0s (a half scale, 16 bytes of nibbles: element j low, j + 16
// high), each block's term sumi * (d_w * d_x), the scale product x86's kernel forms (the generic C
// multiplies sumi by d_w, then by d_x).
float vec_dot_q4_0_q8_0(int n, const Q4Block* x, const BlockQ80* y) {
    float sumf = 0;
    for (int ib = 0; ib < n / QK8_0; ++ib) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_0 / 2; ++j) {
            const int v0 = (x[ib].qs[j] & 0x0F) - 8;
            const int v1 = (x[ib].qs[j] >> 4) - 8;
            sumi0 += v0 * y[ib].qs[j];
            sumi1 += v1 * y[ib].qs[j + QK8_0 / 2];
        }
        sumf += static_cast<float>(sumi0 + sumi1) * (fp16_round_trip(half_to_float(x[ib].d)) * y[ib].d);
    }
    return sumf;
}

}  // namespace

// Every path of the Q4_0 matmul (AVX2 blocks, single rows, batches) against the transcription, bit for
// bit, on weights with zero blocks and blocks whose largest magnitude is negative.
TEST(QuantRules, Q4_0MatmulIsVecDotQ40Q80) {
    const WeightFormat q4 = WeightFormat::q4_0();
    for (const int n : {QK8_0, 9 * QK8_0}) {
        const int d = 19;
        auto w = uniform_floats(static_cast<std::size_t>(n) * d, 2);
        std::fill(w.begin() + QK8_0, w.begin() + 2 * QK8_0, 0.0f);
        w[5] = -7.0f;
        const std::vector<std::byte> reference = ggml_q4_0(w);
        std::vector<Q4Block> blocks(w.size() / QK8_0);
        std::memcpy(blocks.data(), reference.data(), reference.size());
        std::vector<std::byte> encoded(q4.bytes(w.size()));
        encode_weights(encoded.data(), w.data(), w.size(), q4);
        ASSERT_EQ(encoded, reference) << "quantize_row_q4_0_ref's blocks";
        expect_every_path(WeightTensor{q4, blocks.data()}, n, d, 10, 20, [&](int r, const std::vector<BlockQ80>& xq) {
            return vec_dot_q4_0_q8_0(n, blocks.data() + static_cast<std::size_t>(r) * (n / QK8_0), xq.data());
        });
    }
}

// Dequantized, a Q4_0 weight is (q - 8) x d: the element order within a block is ggml's.
TEST(QuantRules, Q4_0DequantizesAsGgml) {
    Q4Block b{float_to_half(0.5f), {}};
    for (int j = 0; j < 16; j++) b.qs[j] = static_cast<std::uint8_t>(j | (15 - j) << 4);
    std::vector<float> out(QK8_0);
    dequantize(out.data(), WeightTensor{WeightFormat::q4_0(), &b}, QK8_0);
    for (int j = 0; j < 16; j++) {
        EXPECT_EQ(out[j], static_cast<float>(j - 8) * 0.5f) << j;
        EXPECT_EQ(out[j + 16], static_cast<float>(7 - j) * 0.5f) << j + 16;
    }
}

// The rule is the format's: the same stored weights multiplied by runq.c's rule give other sums.
TEST(QuantRules, TheFormatsRuleDecides) {
    const int n = 4 * QK8_0, d = 16;
    const StoredQ80 s = stored(uniform_floats(static_cast<std::size_t>(n) * d, 5));
    const auto x = uniform_floats(n, 6);
    const auto product = [&](QuantRule rule) {
        const WeightFormat f{ElementType::q8_0, QK8_0, rule};
        MatmulInput in(f, n);
        in.set(x.data());
        std::vector<float> out(d);
        matmul(out.data(), in, WeightTensor{f, s.q.data(), s.scales.data()}, d);
        return out;
    };
    EXPECT_NE(product(QuantRule::runq), product(QuantRule::ggml));
}

// ---------------------------------------------------------------------------------------------------
// RoPE's base and factors.

TEST(QuantRules, RopeRowsFollowTheBaseAndFactors) {
    const int head_size = 16, positions = 40;
    const std::vector<float> factors = {1.0f, 1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 8.0f, 32.0f};
    const Rope r{head_size, 500000.0f, factors};
    std::vector<float> rows(static_cast<std::size_t>(positions) * head_size);
    rope_rows(rows.data(), 0, positions, r);
    EXPECT_EQ(rope_table(positions, r), rows);
    for (int pos = 0; pos < positions; pos++) {
        for (int i = 0; i < head_size; i += 2) {
            // The float expression the reference documents, bit for bit, and the angle's definition in double.
            const float freq = 1.0f / powf(500000.0f, static_cast<float>(i) / static_cast<float>(head_size));
            const float val = static_cast<float>(pos) * freq / factors[i / 2];
            const float* row = rows.data() + static_cast<std::size_t>(pos) * head_size;
            EXPECT_EQ(bits(row[i]), bits(cosf(val))) << pos << " " << i;
            EXPECT_EQ(bits(row[i + 1]), bits(sinf(val))) << pos << " " << i;
            const double theta = pos * std::pow(500000.0, -static_cast<double>(i) / head_size) / factors[i / 2];
            EXPECT_NEAR(row[i], std::cos(theta), 1e-5) << pos << " " << i;
            EXPECT_NEAR(row[i + 1], std::sin(theta), 1e-5) << pos << " " << i;
        }
    }
    // Rows from a later first position are the same rows.
    std::vector<float> later(static_cast<std::size_t>(5) * head_size);
    rope_rows(later.data(), 30, 5, r);
    EXPECT_TRUE(std::equal(later.begin(), later.end(), rows.begin() + 30 * head_size));
    // A head's factors are head_size / 2.
    EXPECT_THROW(rope_rows(later.data(), 0, 1, Rope{head_size, 500000.0f, std::span(factors).first(4)}),
                 std::invalid_argument);
}

// rope() turns each pair by the table's (cos, sin), query heads and key heads alike; with run.c's base and
// no factors, by run.c's own expression.
TEST(QuantRules, RopeRotatesByTheTable) {
    const int head_size = 8, dim = 32, kv_dim = 16, pos = 13;
    const std::vector<float> factors = {1.0f, 2.0f, 3.0f, 40.0f};
    for (const Rope& r : {Rope{head_size}, Rope{head_size, 500000.0f, factors}}) {
        const auto table = rope_table(pos + 1, r);
        auto q = uniform_floats(dim, 1), k = uniform_floats(kv_dim, 2);
        const auto q0 = q, k0 = k;
        rope(q.data(), k.data(), pos, dim, kv_dim, r);
        for (int i = 0; i < dim; i += 2) {
            const float fcr = table[pos * head_size + i % head_size], fci = table[pos * head_size + i % head_size + 1];
            if (r.factors.empty()) {
                const float freq =
                    1.0f / powf(10000.0f, static_cast<float>(i % head_size) / static_cast<float>(head_size));
                EXPECT_EQ(fcr, cosf(static_cast<float>(pos) * freq));
            }
            EXPECT_EQ(q[i], q0[i] * fcr - q0[i + 1] * fci);
            EXPECT_EQ(q[i + 1], q0[i] * fci + q0[i + 1] * fcr);
            if (i < kv_dim) {
                EXPECT_EQ(k[i], k0[i] * fcr - k0[i + 1] * fci);
                EXPECT_EQ(k[i + 1], k0[i] * fci + k0[i + 1] * fcr);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// A model with a GGUF file's parameters on the device.

namespace {

// A random model of `c`'s shape with ggml's Q8_0 rule, RoPE base 500000 with factors and epsilon 1e-6.
Checkpoint ggml_model() {
    Config c{64, 96, 2, 4, 2, 300, 24, true};
    const HostBytes image = synthetic_checkpoint_image(c, 1, 17);
    constexpr std::size_t kHeader = 256;  // a version-1 file's; the tensors follow in export order
    HostBytes tensors(image.size() - kHeader);
    std::memcpy(tensors.data(), image.data() + kHeader, tensors.size());
    c.norm_eps = 1e-6f;
    c.rope_base = 500000.0f;
    c.rope_factors = {1.0f, 1.0f, 1.0f, 2.0f, 3.0f, 4.0f, 8.0f, 8.0f};
    c.quant_rule = QuantRule::ggml;
    Checkpoint fp32 = Checkpoint::from_tensors(c, std::move(tensors), "ggml-like model", 1);
    return with_weights(std::move(fp32), ElementType::q8_0);
}

double relative_error(std::span<const float> got, std::span<const float> want) {
    double err = 0, scale = 1;
    for (std::size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    }
    return err / scale;
}

}  // namespace

TEST(QuantRules, DeviceRunsAGgmlModelAsTheReference) {
    const Checkpoint ck = ggml_model();
    ASSERT_EQ(ck.weight_format(), (WeightFormat{ElementType::q8_0, QK8_0, QuantRule::ggml}));
    Device device = Device::open("", "");  // PoCL in CI
    const std::vector<int> prompt = {1, 17, 250, 3, 3, 99, 42, 7, 120};
    // The reference: the prompt prefilled (its logits), then positions decoded one by one.
    ReferenceForward ref(ck);
    const std::span<const float> prefilled = ref.prefill(std::span(prompt).first(5), 0);
    const std::vector<float> ref_prefill(prefilled.begin(), prefilled.end());
    std::vector<std::vector<float>> ref_decode;
    for (int pos = 5; pos < static_cast<int>(prompt.size()); pos++) {
        const auto logits = ref.forward(prompt[pos], pos);
        ref_decode.emplace_back(logits.begin(), logits.end());
    }
    struct Run {
        const char* shape;
        Schedule schedule;
    };
    const Run runs[] = {{"exact", Schedule::automatic}, {"exact", Schedule::per_op}, {"exact:16x64", Schedule::automatic},
                        {"cpu", Schedule::automatic}};
    for (const Run& run : runs) {
        SCOPED_TRACE(std::string(run.shape) + (run.schedule == Schedule::per_op ? ", per-op" : ""));
        const bool exact = std::string(run.shape).starts_with("exact");
        // Exact: the reference's arithmetic, and glibc's expf where the device has doubles. The CPU shape's
        // reassociated sums can round an activation to the next integer of its group (test_device_forward's
        // Q8_0 bound).
        const double tolerance = exact ? (device.info().fp64 ? 0.0 : 1e-5) : 0.05;
        DeviceOptions options;
        options.shape = parse_launch_shape(run.shape, device.info());
        options.schedule = run.schedule;
        DeviceForward dev(device, ck, options);
        const auto check = [&](std::span<const float> got, const std::vector<float>& want, const std::string& what) {
            if (tolerance == 0.0)
                EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end(),
                                       [](float a, float b) { return bits(a) == bits(b); }))
                    << what << ": max relative error " << relative_error(got, want);
            else
                EXPECT_LE(relative_error(got, want), tolerance) << what;
        };
        check(dev.prefill(std::span(prompt).first(5), 0), ref_prefill, "prefill's logits");
        for (int pos = 5; pos < static_cast<int>(prompt.size()); pos++)
            check(dev.forward(prompt[pos], pos), ref_decode[static_cast<std::size_t>(pos - 5)],
                  "logits at " + std::to_string(pos));
    }
}
