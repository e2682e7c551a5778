// The CPU reference: each op against a direct computation, and the whole forward pass against an
// independent double-precision transformer written from the equations.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "llamacl/export.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/sampler.hpp"
#include "support.hpp"
#include "models.hpp"

using namespace llamacl;
using llamacl::test::uniform_floats;

namespace {


// y = W x in double
std::vector<double> matvec(const float* w, const std::vector<double>& x, int rows) {
    const int n = static_cast<int>(x.size());
    std::vector<double> y(rows, 0.0);
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < n; ++j) y[i] += static_cast<double>(w[static_cast<std::size_t>(i) * n + j]) * x[j];
    return y;
}

std::vector<double> rmsnorm_d(const std::vector<double>& x, const float* w, double eps = 1e-5) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    std::vector<double> o(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) o[i] = w[i] * x[i] * scale;
    return o;
}

// A direct transformer from the equations (not from run.c's code), in double precision.
class NaiveTransformer {
public:
    explicit NaiveTransformer(const Checkpoint& ck) : ck_(ck), c_(ck.config()), keys_(c_.n_layers), values_(c_.n_layers) {}

    std::vector<double> forward(int token, int pos) {
        const int dim = c_.dim, hs = c_.head_size();
        std::vector<double> x(ck_.token_embedding() + static_cast<std::size_t>(token) * dim,
                              ck_.token_embedding() + static_cast<std::size_t>(token + 1) * dim);
        for (int l = 0; l < c_.n_layers; ++l) {
            const LayerWeights w = ck_.layer(l);
            const auto xn = rmsnorm_d(x, w.rms_att.f32());
            auto q = matvec(w.wq.f32(), xn, dim), k = matvec(w.wk.f32(), xn, c_.kv_dim()), v = matvec(w.wv.f32(), xn, c_.kv_dim());
            const auto rotate = [&](std::vector<double>& vec) {
                for (std::size_t i = 0; i < vec.size(); i += 2) {
                    const double theta = pos * std::pow(10000.0, -static_cast<double>(i % hs) / hs);
                    const double a = vec[i], b = vec[i + 1];
                    vec[i] = a * std::cos(theta) - b * std::sin(theta);
                    vec[i + 1] = a * std::sin(theta) + b * std::cos(theta);
                }
            };
            rotate(q);
            rotate(k);
            keys_[l].push_back(k);
            values_[l].push_back(v);
            std::vector<double> att_out(dim, 0.0);
            for (int h = 0; h < c_.n_heads; ++h) {
                const int kvh = h / c_.kv_mul();
                std::vector<double> score(pos + 1);
                double mx = -1e300, sum = 0;
                for (int t = 0; t <= pos; ++t) {
                    double s = 0;
                    for (int i = 0; i < hs; ++i) s += q[h * hs + i] * keys_[l][t][kvh * hs + i];
                    score[t] = s / std::sqrt(static_cast<double>(hs));
                    mx = std::max(mx, score[t]);
                }
                for (double& s : score) sum += (s = std::exp(s - mx));
                for (int t = 0; t <= pos; ++t)
                    for (int i = 0; i < hs; ++i) att_out[h * hs + i] += score[t] / sum * values_[l][t][kvh * hs + i];
            }
            const auto o = matvec(w.wo.f32(), att_out, dim);
            for (int i = 0; i < dim; ++i) x[i] += o[i];
            const auto xn2 = rmsnorm_d(x, w.rms_ffn.f32());
            auto g = matvec(w.w1.f32(), xn2, c_.hidden_dim);
            const auto u = matvec(w.w3.f32(), xn2, c_.hidden_dim);
            for (int i = 0; i < c_.hidden_dim; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const auto down = matvec(w.w2.f32(), g, dim);
            for (int i = 0; i < dim; ++i) x[i] += down[i];
        }
        return matvec(ck_.classifier().f32(), rmsnorm_d(x, ck_.rms_final()), c_.vocab_size);
    }

private:
    const Checkpoint& ck_;
    Config c_;
    std::vector<std::vector<std::vector<double>>> keys_, values_;  // [layer][pos][kv_dim]
};

}  // namespace

// run.c's epsilon and another (a GGUF file's); inputs small enough that the epsilon matters.
TEST(Reference, RmsnormMatchesDefinition) {
    for (const float eps : {1e-5f, 1e-6f}) {
        for (int n : {1, 7, 64, 301}) {
            auto x = uniform_floats(n, 1);
            const auto w = uniform_floats(n, 2);
            if (n == 7) for (float& v : x) v *= 1e-3f;
            std::vector<float> out(n);
            rmsnorm(out.data(), x.data(), w.data(), n, eps);
            const auto expect = rmsnorm_d({x.begin(), x.end()}, w.data(), eps);
            for (int i = 0; i < n; ++i)
                EXPECT_NEAR(out[i], expect[i], 1e-5 * std::fabs(expect[i]) + 1e-7)
                    << "eps=" << eps << " n=" << n << " i=" << i;
        }
    }
}

TEST(Reference, MatmulMatchesDefinition) {
    const int n = 37, d = 11;
    const auto w = uniform_floats(static_cast<std::size_t>(n) * d, 3), x = uniform_floats(n, 4);
    std::vector<float> out(d);
    matmul(out.data(), x.data(), w.data(), n, d);
    const auto expect = matvec(w.data(), {x.begin(), x.end()}, d);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(out[i], expect[i], 1e-5);
}

// The matmul's rows are summed eight at a time, by several threads, but each must equal run.c's loop
// bit for bit: sizes with rows past the blocks and the shares, columns past the eight-column steps,
// and work below and above the threshold for sharing; f32 and f16 weights, and f32 read from a laid-out
// copy (lay_out_row_blocks, made in two parts as the reference's threads make it).
TEST(Reference, MatmulSumsEveryRowInRunCsOrder) {
    struct Size {
        int n, d;
    };
    for (const Size s : {Size{1, 1}, Size{7, 5}, Size{8, 16}, Size{37, 11}, Size{288, 300}, Size{100, 1001},
                         Size{512, 4096}}) {
        const std::size_t elements = static_cast<std::size_t>(s.n) * s.d;
        const auto w = uniform_floats(elements, 5), x = uniform_floats(static_cast<std::size_t>(s.n), 6);
        std::vector<std::uint16_t> halves(elements);
        std::vector<float> widened(elements);
        for (std::size_t e = 0; e < elements; ++e) {
            halves[e] = static_cast<std::uint16_t>((e * 2654435761u) & 0x7bff);  // finite halves, both signs
            widened[e] = half_to_float(halves[e]);
        }
        std::vector<float> laid(elements, std::numeric_limits<float>::quiet_NaN());  // (what is not written: NaN)
        const int half = s.d / 2 / kRowBlockRows * kRowBlockRows;
        lay_out_row_blocks(laid.data(), w.data(), s.n, 0, half);
        lay_out_row_blocks(laid.data(), w.data(), s.n, half, s.d);
        for (const int variant : {0, 1, 2}) {  // f32, f16, f32 laid out
            const bool f16 = variant == 1;
            const float* wf = f16 ? widened.data() : w.data();
            std::vector<float> expect(static_cast<std::size_t>(s.d));
            for (int i = 0; i < s.d; ++i) {
                float val = 0.0f;
                for (int j = 0; j < s.n; ++j) val += wf[static_cast<std::size_t>(i) * s.n + j] * x[j];
                expect[i] = val;
            }
            const WeightFormat format{f16 ? ElementType::f16 : ElementType::f32};
            MatmulInput in(format, s.n);
            in.set(x.data());
            std::vector<float> out(static_cast<std::size_t>(s.d), -1.0f);
            const WeightTensor tensor{format, f16 ? static_cast<const void*>(halves.data()) : w.data(), nullptr,
                                      variant == 2 ? laid.data() : nullptr};
            matmul(out.data(), in, tensor, s.d);
            for (int i = 0; i < s.d; ++i)
                ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(expect[i]))
                    << (f16 ? "f16" : variant == 2 ? "f32 laid out" : "f32") << " n=" << s.n << " d=" << s.d << " row "
                    << i;
        }
    }
}

// Matrices of random weights (seeds from `seed`) stored in `format`: fp32 as they are, Q8_0 quantized in
// groups of 16. The tensors view this object's storage.
struct TestMatrices {
    TestMatrices(const WeightFormat& format, std::span<const int> rows, int n, unsigned seed) {
        const std::size_t count = rows.size();
        w.resize(count);
        q8.resize(count);
        scales.resize(count);
        for (std::size_t m = 0; m < count; ++m) {
            w[m] = uniform_floats(static_cast<std::size_t>(rows[m]) * n, seed + static_cast<unsigned>(m));
            if (format.type == ElementType::q8_0) {
                q8[m].resize(w[m].size());
                const int gs = format.group_size;
                scales[m].resize(w[m].size() / static_cast<std::size_t>(gs));
                quantize(q8[m].data(), scales[m].data(), w[m].data(), static_cast<int>(w[m].size()), gs);
                tensors.push_back(WeightTensor{format, q8[m].data(), scales[m].data()});
            } else {
                tensors.push_back(WeightTensor{format, w[m].data()});
            }
        }
    }
    std::vector<std::vector<float>> w;
    std::vector<std::vector<std::int8_t>> q8;
    std::vector<std::vector<float>> scales;
    std::vector<WeightTensor> tensors;
};

// Matmuls of one input shared as one (matmuls): each output is matmul()'s alone, bit for bit, with
// products whose rows do not fill the blocks (so that shares span two products, and a share starts inside
// a block), with Q8_0 weights, and with f32 read from laid-out copies (lay_out_row_blocks).
TEST(Reference, MatmulsOfOneInputAreEachMatmul) {
    const int n = 64;
    const int rows[] = {64, 37, 5, 172};
    const auto x = uniform_floats(n, 7);
    for (const int variant : {0, 1, 2}) {  // f32, Q8_0, f32 laid out
        const WeightFormat format = variant == 1 ? WeightFormat{ElementType::q8_0, 16} : WeightFormat{ElementType::f32};
        const TestMatrices matrices(format, rows, n, 20);
        std::vector<WeightTensor> tensors = matrices.tensors;
        std::vector<std::vector<float>> laid(4);
        for (int m = 0; variant == 2 && m < 4; ++m) {
            laid[m].assign(matrices.w[m].size(), std::numeric_limits<float>::quiet_NaN());
            lay_out_row_blocks(laid[m].data(), matrices.w[m].data(), n, 0, rows[m]);
            tensors[m].row_blocks = laid[m].data();
        }
        MatmulInput in(format, n);
        in.set(x.data());
        std::vector<std::vector<float>> alone(4), together(4);
        for (int m = 0; m < 4; ++m) {
            alone[m].assign(static_cast<std::size_t>(rows[m]), -1.0f);
            together[m].assign(static_cast<std::size_t>(rows[m]), -2.0f);
            matmul(alone[m].data(), in, matrices.tensors[m], rows[m]);  // (never laid out)
        }
        matmuls(in, {{together[0].data(), tensors[0], rows[0]},
                     {together[1].data(), tensors[1], rows[1]},
                     {together[2].data(), tensors[2], rows[2]},
                     {together[3].data(), tensors[3], rows[3]}});
        for (int m = 0; m < 4; ++m)
            for (int i = 0; i < rows[m]; ++i)
                ASSERT_EQ(std::bit_cast<std::uint32_t>(together[m][i]), std::bit_cast<std::uint32_t>(alone[m][i]))
                    << format.describe() << (variant == 2 ? " laid out" : "") << " product " << m << " row " << i;
    }
}

// Matmuls of a batch of inputs (a prompt's positions): each input's outputs, at its stride, are matmul()'s
// of that input alone, bit for bit, with rows enough for several chunks a thread (n 64: 128 f32 rows,
// 409 Q8_0 rows a chunk), a product whose rows end inside a block, and inputs past the last whole
// group of eight (11: float rows take eight inputs at a time).
TEST(Reference, MatmulsOfABatchAreEachInputsMatmul) {
    const int n = 64, batch = 11, rows[] = {1000, 37};
    const std::size_t stride[] = {1003, 40};  // room past each input's rows, which must stay untouched
    // (Q8_0 groups of 16 and 64 take the eight-input block where the CPU has one; groups of 4 never do.)
    for (const WeightFormat format : {WeightFormat{ElementType::f32}, WeightFormat{ElementType::q8_0, 4},
                                      WeightFormat{ElementType::q8_0, 16}, WeightFormat{ElementType::q8_0, 64}}) {
        const TestMatrices matrices(format, rows, n, 40);
        const std::vector<WeightTensor>& tensors = matrices.tensors;
        std::vector<std::vector<float>> x;
        std::vector<MatmulInput> inputs(batch, MatmulInput(format, n));
        for (int i = 0; i < batch; ++i) {
            x.push_back(uniform_floats(n, 60 + i));
            inputs[i].set(x[i].data());
        }
        std::vector<float> together[2] = {std::vector<float>(batch * stride[0], -2.0f),
                                          std::vector<float>(batch * stride[1], -2.0f)};
        matmuls(inputs, {{together[0].data(), tensors[0], rows[0], stride[0]},
                         {together[1].data(), tensors[1], rows[1], stride[1]}});
        for (int i = 0; i < batch; ++i) {
            for (int m = 0; m < 2; ++m) {
                std::vector<float> alone(static_cast<std::size_t>(rows[m]));
                matmul(alone.data(), inputs[i], tensors[m], rows[m]);
                for (std::size_t r = 0; r < stride[m]; ++r) {
                    const float got = together[m][i * stride[m] + r];
                    const float want = r < alone.size() ? alone[r] : -2.0f;
                    ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
                        << format.describe() << " input " << i << " product " << m << " row " << r;
                }
            }
        }
    }
}

TEST(Reference, RopeRotatesPairsOfQueryAndKeyOnly) {
    const int dim = 16, kv_dim = 8, head_size = 8;
    auto q = uniform_floats(dim, 5), k = uniform_floats(kv_dim, 6);
    const auto q0 = q, k0 = k;
    rope(q.data(), k.data(), 0, dim, kv_dim, Rope{head_size});
    EXPECT_EQ(q, q0);  // position 0 is the identity
    EXPECT_EQ(k, k0);
    rope(q.data(), k.data(), 5, dim, kv_dim, Rope{head_size});
    for (int i = 0; i < dim; i += 2) {
        const double theta = 5 * std::pow(10000.0, -static_cast<double>(i % head_size) / head_size);
        EXPECT_NEAR(q[i], q0[i] * std::cos(theta) - q0[i + 1] * std::sin(theta), 1e-5);
        EXPECT_NEAR(q[i + 1], q0[i] * std::sin(theta) + q0[i + 1] * std::cos(theta), 1e-5);
        if (i < kv_dim) {
            EXPECT_NEAR(k[i], k0[i] * std::cos(theta) - k0[i + 1] * std::sin(theta), 1e-5);
        }
    }
}

TEST(Reference, SwigluMatchesDefinition) {
    auto hb = uniform_floats(33, 7, -4, 4);
    const auto hb2 = uniform_floats(33, 8), h0 = hb;
    swiglu(hb.data(), hb2.data(), 33);
    for (int i = 0; i < 33; ++i) EXPECT_NEAR(hb[i], h0[i] / (1 + std::exp(-h0[i])) * hb2[i], 1e-5);
}

class ReferenceForwardTest : public ::testing::TestWithParam<int> {};

TEST_P(ReferenceForwardTest, MatchesADirectDoublePrecisionTransformer) {
    test::TempDir dir;
    const Config c = test::small_config(GetParam(), /*shared=*/GetParam() != 2);
    const Checkpoint ck = Checkpoint::open(test::write_model(dir, c).string());
    ReferenceForward ref(ck);
    NaiveTransformer naive(ck);
    const int tokens[] = {1, 42, 7, 299, 3, 150, 150, 9};
    for (int pos = 0; pos < 8; ++pos) {
        const std::span<float> logits = ref.forward(tokens[pos], pos);
        const std::vector<double> expect = naive.forward(tokens[pos], pos);
        ASSERT_EQ(logits.size(), expect.size());
        double max_err = 0, scale = 0;
        for (std::size_t i = 0; i < expect.size(); ++i) {
            max_err = std::max(max_err, std::abs(logits[i] - expect[i]));
            scale = std::max(scale, std::abs(expect[i]));
        }
        EXPECT_LT(max_err, 1e-4 * std::max(1.0, scale)) << "pos " << pos;
    }
}

INSTANTIATE_TEST_SUITE_P(HeadLayouts, ReferenceForwardTest, ::testing::Values(6, 2, 1),
                         [](const auto& p) { return std::string(p.param == 6 ? "MHA" : p.param == 2 ? "GQA" : "MQA"); });

// The reference's prefill (positions in batches, each layer's matmuls reading the weights once a batch)
// gives every position forward()'s logits, bit for bit, and leaves the same keys and values in the cache:
// prompts of one position, either side of a batch's edge (kBatch) and across two edges, from position 0
// and from inside the context, in every weight format.
TEST(ReferencePrefill, EveryPositionHasForwardsBitsAndCache) {
    test::TempDir dir;
    const int b = ReferenceForward::kBatch;
    Config c = test::small_config(2, /*shared=*/false);
    c.seq_len = 2 * b + 8;
    c.dim = 64;  // Q8_0 groups of 32 (the largest dividing dim and hidden_dim): the CPU's eight-input blocks
    c.n_heads = 4;
    c.hidden_dim = 96;
    const Checkpoint fp32 = Checkpoint::open(test::write_model(dir, c, 1).string());
    for (const ElementType type : {ElementType::f32, ElementType::f16, ElementType::q8_0}) {
        const Checkpoint ck = with_weights(Checkpoint::open(fp32.path()), type);
        for (const auto& [first, count] : std::vector<std::pair<int, int>>{{0, 1}, {0, b}, {0, b + 1}, {3, b - 1}, {5, 2 * b + 3}}) {
            SCOPED_TRACE(std::string(element_name(type)) + " positions " + std::to_string(first) + ".." +
                         std::to_string(first + count - 1));
            std::vector<int> tokens;
            for (int i = 0; i < first + count; ++i) tokens.push_back((i * 37 + 11) % c.vocab_size);
            ReferenceForward batched(ck), single(ck);
            for (int pos = 0; pos < first; ++pos) {
                batched.forward(tokens[pos], pos);
                single.forward(tokens[pos], pos);
            }
            std::vector<std::vector<float>> want;
            for (int pos = first; pos < first + count; ++pos) {
                const std::span<float> logits = single.forward(tokens[pos], pos);
                want.emplace_back(logits.begin(), logits.end());
            }
            const std::span<const int> prompt = std::span<const int>(tokens).subspan(static_cast<std::size_t>(first));
            int expected_pos = first;
            batched.prefill(prompt, first, [&](int pos, std::span<float> logits) {
                ASSERT_EQ(pos, expected_pos++);
                const std::vector<float>& w = want[static_cast<std::size_t>(pos - first)];
                ASSERT_EQ(0, std::memcmp(logits.data(), w.data(), w.size() * sizeof(float))) << "logits at " << pos;
            });
            EXPECT_EQ(expected_pos, first + count);
            for (int l = 0; l < c.n_layers; ++l) {
                for (const Op op : {Op::k, Op::v}) {
                    const std::span<const float> got = batched.cache_rows(l, op, 0, first + count);
                    const std::span<const float> expect = single.cache_rows(l, op, 0, first + count);
                    ASSERT_EQ(0, std::memcmp(got.data(), expect.data(), got.size_bytes())) << "layer " << l << " " << op_name(op);
                }
            }
            // Only the last position's logits, asked for alone (a fresh run: the same prompt again).
            ReferenceForward last_only(ck);
            for (int pos = 0; pos < first; ++pos) last_only.forward(tokens[pos], pos);
            const std::span<float> last = last_only.prefill(prompt, first);
            EXPECT_EQ(0, std::memcmp(last.data(), want.back().data(), last.size_bytes()));
        }
    }
}

// A run that reaches ReferenceForward::kLayOutPositions reads its f32 matrices from a laid-out copy; a
// shorter one reads the file's. Every position's logits are the same bits either way, on a model whose
// rows are not whole steps of eight columns (dim 36) nor whole blocks of eight rows (kv_dim 12).
TEST(Reference, LaidOutMatricesGiveTheFilesLogits) {
    test::TempDir dir;
    Config c{36, 100, 2, 6, 2, 300, ReferenceForward::kLayOutPositions, true};
    const Checkpoint ck = Checkpoint::open(test::write_model(dir, c, 3).string());
    ASSERT_GT(ReferenceForward::laid_out_bytes(ck.config()), 0u);
    const int positions = 16;
    ReferenceForward laid_out(ck), plain(ck, positions);
    int token = 1;
    for (int pos = 0; pos < positions; ++pos) {
        const std::span<float> want = plain.forward(token, pos), got = laid_out.forward(token, pos);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size_bytes())) << "logits at " << pos;
        token = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
    }
}

// A version-1 file's size does not bound its context: a tiny model may claim millions of positions. Its
// KV cache and attention scores are sized for all of them but take memory only as positions are
// written, so a run that stops early never holds the rest.
TEST(Reference, ALongContextTakesMemoryOnlyForThePositionsReached) {
    test::TempDir dir;
    const Config c{8, 16, 1, 2, 2, 300, 1 << 22, true};
    const Checkpoint ck = Checkpoint::open(test::write_model(dir, c, 1).string());
    const std::uint64_t before = test::resident_bytes();
    if (before == 0) GTEST_SKIP() << "no /proc/self/statm to read resident memory from";
    ReferenceForward ref(ck);
    int token = 1;
    for (int pos = 0; pos < 8; ++pos) {
        const std::span<float> logits = ref.forward(token, pos);
        ASSERT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
        token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    EXPECT_LT(test::resident_bytes() - std::min(before, test::resident_bytes()), std::uint64_t{64} << 20);
}

TEST(Reference, ReportsEveryBoundaryInOrderWithItsSize) {
    test::TempDir dir;
    const Config c = test::small_config();
    const Checkpoint ck = Checkpoint::open(test::write_model(dir, c).string());
    ReferenceForward ref(ck);
    std::vector<std::pair<int, Op>> seen;
    std::vector<float> last_residual, final_logits;
    const auto logits = ref.forward(5, 0, [&](int layer, Op op, std::span<const float> values) {
        seen.emplace_back(layer, op);
        const std::size_t expect_size = op == Op::ffn_hidden ? c.hidden_dim
                                        : op == Op::k || op == Op::v ? c.kv_dim()
                                        : op == Op::logits ? c.vocab_size : c.dim;
        EXPECT_EQ(values.size(), expect_size) << op_name(op);
        if (op == Op::ffn_residual) last_residual.assign(values.begin(), values.end());
    });
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(c.n_layers * 9 + 2));
    for (int l = 0; l < c.n_layers; ++l)
        for (int i = 0; i < 9; ++i) EXPECT_EQ(seen[l * 9 + i], std::make_pair(l, static_cast<Op>(i)));
    EXPECT_EQ(seen[c.n_layers * 9], std::make_pair(-1, Op::final_norm));
    EXPECT_EQ(seen.back(), std::make_pair(-1, Op::logits));
    // classify() of the last residual reproduces the logits (the --finalize=cpu path).
    final_logits.assign(logits.begin(), logits.end());
    std::vector<float> normed(c.dim), again(c.vocab_size);
    classify(ck.config(), ck.rms_final(), ck.classifier(), last_residual.data(), normed.data(), again.data());
    EXPECT_EQ(again, final_logits);
}

TEST(Reference, OpNamesRoundTrip) {
    for (int i = 0; i < kOpCount; ++i) {
        Op op{};
        ASSERT_TRUE(parse_op(op_name(static_cast<Op>(i)), op));
        EXPECT_EQ(static_cast<int>(op), i);
    }
    Op op{};
    EXPECT_FALSE(parse_op("attn", op));
}
