// Every OpenCL kernel of the forward pass against its CPU twin, for each launch shape the runtime can
// pick: "exact" (1 work-item per row, run.c's loops), "cpu" (1 work-item per row, float16 multiply-adds),
// "gpu" (16x256, consecutive floats per row's work-items, staged input and tree reductions), and "4x16",
// "2x2" (small groups, so row counts and head sizes straddle them); and for each weight format the
// device's kernels read (f32, f16). The checks themselves, their cases and their tolerances are
// src/kernel_checks.cpp's, which `llama-cl check` runs too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "llamacl/device.hpp"
#include "llamacl/kernel_checks.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/model_math.hpp"

using namespace llamacl;

namespace llamacl {
// The format in test names' parameters: "f16", not its bytes.
void PrintTo(ElementType type, std::ostream* out) { *out << element_name(type); }
}  // namespace llamacl

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// One device, one harness per launch shape (built once per process).
Device& test_device() {
    static Device device = Device::open("", "");  // PoCL in CI
    return device;
}

KernelHarness& harness(const std::string& shape_name, ElementType weights) {
    static std::map<std::pair<std::string, ElementType>, std::unique_ptr<KernelHarness>> cache;
    auto& h = cache[{shape_name, weights}];
    if (!h) {
        Device& device = test_device();
        h = std::make_unique<KernelHarness>(device, parse_launch_shape(shape_name, device.info()), WeightFormat{weights});
    }
    return *h;
}

std::string failure_lines(const KernelCheckResult& r) {
    std::string out;
    for (const std::string& line : r.failures) out += line + "\n";
    return out;
}

#define EXPECT_KERNEL_CHECK_PASSES(result)                                  \
    do {                                                                    \
        const KernelCheckResult r_ = (result);                              \
        EXPECT_TRUE(r_.passed()) << r_.name << ":\n" << failure_lines(r_); \
    } while (0)

// (launch shape, weight format)
class KernelVsReference : public ::testing::TestWithParam<std::tuple<std::string, ElementType>> {
protected:
    KernelHarness& h() { return harness(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(KernelVsReference, AttnQkvRope) { EXPECT_KERNEL_CHECK_PASSES(check_attn_qkv_rope(h())); }
TEST_P(KernelVsReference, Attention) { EXPECT_KERNEL_CHECK_PASSES(check_attention(h())); }
TEST_P(KernelVsReference, AttentionLongContext) { EXPECT_KERNEL_CHECK_PASSES(check_attention_long_context(h())); }
TEST_P(KernelVsReference, MatvecResidual) { EXPECT_KERNEL_CHECK_PASSES(check_matvec_residual(h())); }
TEST_P(KernelVsReference, FfnGateUp) { EXPECT_KERNEL_CHECK_PASSES(check_ffn_gate_up(h())); }
TEST_P(KernelVsReference, ClassifierBlocks) { EXPECT_KERNEL_CHECK_PASSES(check_classifier(h())); }
TEST_P(KernelVsReference, GreedyArgmaxAndEmbedding) { EXPECT_KERNEL_CHECK_PASSES(check_greedy_argmax(h())); }
TEST_P(KernelVsReference, RmsnormRows) { EXPECT_KERNEL_CHECK_PASSES(check_rmsnorm_rows(h())); }
TEST_P(KernelVsReference, Gemm) { EXPECT_KERNEL_CHECK_PASSES(check_gemm(h())); }
TEST_P(KernelVsReference, RopeRows) { EXPECT_KERNEL_CHECK_PASSES(check_rope_rows(h())); }
TEST_P(KernelVsReference, AttentionRows) { EXPECT_KERNEL_CHECK_PASSES(check_attention_rows(h())); }
TEST_P(KernelVsReference, Swiglu) { EXPECT_KERNEL_CHECK_PASSES(check_swiglu(h())); }

// The chunking policy: enough (head, chunk) work-groups for the device, no chunk with fewer keys'
// elements than the minimum, one chunk where no work-group can combine them (CPU shapes, OpenCL C 1.2),
// and where they can, none longer than the scores' capacity.
TEST_P(KernelVsReference, AttentionChunks) {
    const KernelSet& k = this->h().kernels;
    const int head_size = 64, positions_per_chunk = KernelSet::kMinAttentionChunk / head_size;
    for (int positions : {1, positions_per_chunk - 1, positions_per_chunk, 3 * positions_per_chunk + 5,
                          100 * positions_per_chunk}) {
        const int chunks = k.attention_chunks(1, head_size, positions);
        if (!k.device_fences()) {
            EXPECT_EQ(chunks, 1);
            continue;
        }
        EXPECT_GE(chunks, 1);
        EXPECT_LE(chunks, KernelSet::kMaxAttentionChunks);
        if (chunks > 1) {
            EXPECT_GE(positions / chunks, positions_per_chunk) << positions << " positions in " << chunks << " chunks";
        }
        EXPECT_LE(chunks, k.attention_chunks(1, head_size, positions + positions_per_chunk)) << "grows with context";
    }
    if (k.device_fences()) {
        EXPECT_GT(k.attention_chunks(1, head_size, 100 * positions_per_chunk), 1);
        for (int pos : {KernelSet::kScoreCapacity - 1, KernelSet::kScoreCapacity, 20 * KernelSet::kScoreCapacity + 3}) {
            const int chunk_len = k.attention_chunk_len(1, head_size, pos);
            EXPECT_LE(chunk_len, KernelSet::kScoreCapacity) << "at " << pos;
            EXPECT_LE(attention_chunk_count(pos, chunk_len),
                      max_attention_chunks(Config{64, 64, 1, 1, 1, 64, 20 * KernelSet::kScoreCapacity + 4, true}))
                << "the partial results' buffer holds every chunk";
        }
    }
    if (!k.shape().gpu_family()) {
        EXPECT_FALSE(k.device_fences()) << "CPU shapes are built as OpenCL C 1.2";
    }
}


// The bound the capacity plan counts: a chunk of at least kMinAttentionChunk keys' elements, at most
// kMaxAttentionChunks chunks, unless a context needs more to keep each within kScoreCapacity positions
// (Config: dim, hidden, layers, heads, kv heads, vocab, seq_len, shared).
TEST(MaxAttentionChunks, CappedUntilChunksWouldOutgrowTheScoreCapacity) {
    const int per_chunk = KernelSet::kMinAttentionChunk / 64;  // positions, with head_size 64 below
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, per_chunk - 1, true}), 1);
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, 3 * per_chunk + 5, true}), 3);
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, 100 * per_chunk, true}), KernelSet::kMaxAttentionChunks);
    const int beyond = KernelSet::kMaxAttentionChunks * KernelSet::kScoreCapacity + 1;
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, beyond, true}), KernelSet::kMaxAttentionChunks + 1);
}

// The rule that gives short matrices more work-items per row: double while the launch has fewer groups
// than asked, a row still has four elements per work-item and a group still holds a row.
TEST(WidenedRowThreads, DoublesUntilTheLaunchHasEnoughGroups) {
    const LaunchShape gpu{16, 256, 1};
    // 4096 rows, 16 per group: 256 groups; 264 asked -> 32 per row (8 rows a group, 512 groups).
    EXPECT_EQ(widened_row_threads(gpu, 4096, 4096, 264), 32);
    EXPECT_EQ(widened_row_threads(gpu, 4096, 4096, 256), 16);  // already enough
    EXPECT_EQ(widened_row_threads(gpu, 2048, 8192, 264), 64);  // 128 -> 256 -> 512 groups
    // Bounded by the group (one row per group of 256) and by four elements per work-item (n = 512: 128).
    EXPECT_EQ(widened_row_threads(gpu, 3, 100000, 1000), 256);
    EXPECT_EQ(widened_row_threads(gpu, 3, 512, 1000), 128);
    EXPECT_EQ(widened_row_threads(gpu, 3, 40, 1000), 16);  // never narrower than the shape's own
    // CPU shapes keep one work-item per row.
    EXPECT_EQ(widened_row_threads(LaunchShape{1, 1, 16}, 3, 100000, 1000), 1);
}

// The rule that gives work-items with long shares of a row the long batch of loads.
TEST(DotBatch, LongOnlyWhenEveryWorkItemHasAWholeBatch) {
    EXPECT_EQ(dot_batch(4096, 16), kLongDotBatch);   // 7B's rows: 256 elements per work-item
    EXPECT_EQ(dot_batch(2048, 64), kLongDotBatch);   // exactly one long batch each
    EXPECT_EQ(dot_batch(2047, 64), kShortDotBatch);  // one element short of it
    EXPECT_EQ(dot_batch(768, 64), kShortDotBatch);   // stories110M's widened rows: 12 each
    EXPECT_LT(kShortDotBatch, kLongDotBatch);
}

// The token kernel's batch (32 work-items per row): a dim row's share per work-item when it is longer than
// dot_batch's choice and fits a long batch, so that a step's rows of dim load in its first batch.
TEST(DotBatch, TokenKernelBatchCoversADimRowUpToTheLongBatch) {
    EXPECT_EQ(token_dot_batch(768, 288, 32), 9);               // stories15M: 9 floats of a dim row each
    EXPECT_EQ(token_dot_batch(2048, 768, 32), kLongDotBatch);  // stories110M: w2's long rows; 24 fit in it
    EXPECT_EQ(token_dot_batch(172, 64, 32), kShortDotBatch);   // stories260K: 2 each
    EXPECT_EQ(token_dot_batch(8192, 2048, 32), kLongDotBatch); // llama3.2-1b: a share of 64 is not taken
}

// ---------------------------------------------------------------------------------------------------
// Warp shuffles (NVIDIA): the GPU shape's reductions combine a row's lanes, a score's slices and a
// work-group's last 32 partial results by shuffles instead of local memory, adding the same pairs in the
// same order, so every output must be the same bits as the local-memory trees' build gives.

TEST(WarpShuffles, SameBitsAsLocalMemoryTrees) {
    Device& device = test_device();
    const LaunchShape shape = parse_launch_shape("gpu", device.info());
    KernelHarness shuffles(device, shape), trees(device, shape, {}, false);
    if (!shuffles.kernels.warp_shuffles())
        GTEST_SKIP() << device.info().name << " offers no warp shuffles (NVIDIA's 32-wide warps): nothing to compare";
    ASSERT_FALSE(trees.kernels.warp_shuffles());
    std::mt19937 rng(2024);
    // (Both builds' outputs are also checked against the reference: KernelShapes/KernelVsReference.gpu_f32.)
    const auto same = [&](const std::function<cl::Buffer(KernelHarness&)>& run, std::size_t n, const std::string& what) {
        const std::vector<float> got = shuffles.download(run(shuffles), n);
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); })) << what;
        KernelCheckResult result(what);
        KernelComparer(result).bit_identical(got, trees.download(run(trees), n), what);
        EXPECT_TRUE(result.passed()) << failure_lines(result);
    };
    // attn_qkv_rope (the RMSNorm's group sum, each row pair's lane sums) and matvec_residual (a row's lane
    // sums), with rows enough that the launch keeps rows of at most a warp's lanes (widened_row_threads).
    const int dim = 2048, head_size = 64, rows = 4096, n = 512;
    const auto x = random_vector(dim, rng, -2.0f, 2.0f), norm = random_vector(dim, rng, 0.5f, 1.5f);
    const auto wq = random_vector(static_cast<std::size_t>(dim) * dim, rng);
    const auto rope = rope_table(1, head_size);
    same([&](KernelHarness& h) {
        cl::Buffer q = h.upload(std::vector<float>(dim, kKernelSentinel)), xn = h.upload(std::vector<float>(dim));
        cl::Buffer keys = h.upload(std::vector<float>(dim)), values = h.upload(std::vector<float>(dim));
        const cl::Buffer w = h.upload(wq);
        h.run(KernelSet::Matvec::attn_qkv_rope, (3 * dim) / 2, dim, h.upload(x), h.upload(norm), w, w, w,
              h.upload(rope), q, keys, values, xn, dim, dim, head_size, 0, h.kernels.staged_space(dim),
              h.kernels.staged_count(dim));
        return q;
    }, dim, "attn_qkv_rope's q");
    const auto w = random_vector(static_cast<std::size_t>(rows) * n, rng), in = random_vector(n, rng);
    const auto residual = random_vector(rows, rng);
    same([&](KernelHarness& h) {
        cl::Buffer out = h.upload(residual);
        h.run(KernelSet::Matvec::matvec_residual, rows, n, h.upload(w), h.upload(in), out, n, rows,
              h.kernels.staged_space(n), h.kernels.staged_count(n));
        return out;
    }, rows, "matvec_residual's x");
    // attention (the scores' slices, the softmax's group max and sum), one chunk and eight.
    const int heads = 6, pos = 200, head = 48;
    const auto q = random_vector(heads * head, rng, -2.0f, 2.0f);
    const auto keys = random_vector(static_cast<std::size_t>(pos + 1) * heads * head, rng);
    const auto values = random_vector(keys.size(), rng);
    for (int chunk_len : {pos + 1, 26}) {
        const int chunks = attention_chunk_count(pos, chunk_len);
        same([&](KernelHarness& h) {
            cl::Buffer out = h.upload(std::vector<float>(q.size(), kNaN));
            h.run(h.kernels.attention, h.kernels.heads(heads, chunks), h.upload(q), h.upload(keys), h.upload(values),
                  h.upload(std::vector<float>(1)), out,
                  h.upload(std::vector<float>(static_cast<std::size_t>(heads) * chunks * (head + 2))),
                  h.upload(std::vector<float>(heads, 0.0f)), heads, head, heads * head, 1, pos + 1, pos,
                  chunk_len);
            return out;
        }, q.size(), "attention in " + std::to_string(chunks) + " chunks");
    }
}

// ---------------------------------------------------------------------------------------------------
// Q8_0 weights (kernels/dot_q8.cl, prefill_q8.cl) against their CPU twins in model_math (quantize, matmul of
// a MatmulInput), for group sizes 4, 12 (no power of two) and 64. An input quantized alike gives the same
// integers, so the CPU families, whose one work-item per row adds the groups' terms in runq.c's order,
// are bit-identical to the twin where the divisions are correctly rounded; the GPU family's lanes add
// theirs in a tree (the shape's tolerance). The normalizing kernels quantize the RMSNorm they write to xn:
// their twins quantize that xn (which the shape's RMSNorm tests check), as a last-bit difference there
// may round a value to the next integer.

// The expectations of the Q8_0 tests below, through the checks' comparer.
void expect_compared(const std::string& what, const std::function<void(KernelComparer&)>& compare) {
    KernelCheckResult r(what);
    KernelComparer cmp(r);
    compare(cmp);
    EXPECT_TRUE(r.passed()) << failure_lines(r);
}
void expect_bit_identical(std::span<const float> got, std::span<const float> want, const std::string& what) {
    expect_compared(what, [&](KernelComparer& c) { c.bit_identical(got, want, what); });
}
void expect_close(std::span<const float> got, std::span<const float> want, double rel, const std::string& what) {
    expect_compared(what, [&](KernelComparer& c) { c.close(got, want, rel, what); });
}
void expect_match(const KernelHarness& h, bool exact_here, std::span<const float> got, std::span<const float> want,
                  const std::string& what) {
    expect_compared(what, [&](KernelComparer& c) { c.match(h, exact_here, got, want, what); });
}
void expect_untouched(std::span<const float> got, const std::string& what) {
    expect_compared(what, [&](KernelComparer& c) { c.untouched(got, what); });
}
std::span<const float> slice(const std::vector<float>& v, std::size_t offset, std::size_t count) {
    return std::span<const float>(v).subspan(offset, count);
}
constexpr float kSentinel = kKernelSentinel;

// Each launch shape.
class Q8VsReference : public ::testing::TestWithParam<std::string> {};

bool correctly_rounded_division(Device& device) {
    return (device.device().getInfo<CL_DEVICE_SINGLE_FP_CONFIG>() & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
}

KernelHarness& q8_harness(const std::string& shape_name, int group_size) {
    static std::map<std::pair<std::string, int>, std::unique_ptr<KernelHarness>> cache;
    auto& h = cache[{shape_name, group_size}];
    if (!h) {
        Device& device = test_device();
        h = std::make_unique<KernelHarness>(device, parse_launch_shape(shape_name, device.info()),
                                            WeightFormat{ElementType::q8_0, group_size});
    }
    return *h;
}

// Whether the Q8_0 kernels of h sum a row's groups in runq.c's order (bit for bit).
bool q8_in_order(KernelHarness& h) { return !h.kernels.shape().gpu_family() && correctly_rounded_division(h.device); }

void expect_q8_match(KernelHarness& h, bool exact_here, std::span<const float> got, std::span<const float> want,
                     const std::string& what) {
    if (exact_here && q8_in_order(h))
        expect_bit_identical(got, want, what);
    else
        expect_close(got, want, h.tolerance, what);
}

// A matrix quantized as runq.c quantizes (model_math's quantize), and its bytes in the device layout.
struct Q8Matrix {
    WeightFormat format;
    std::vector<std::int8_t> q;
    std::vector<float> scales;
    WeightTensor tensor() const { return {format, q.data(), scales.data()}; }
};
Q8Matrix quantized(const std::vector<float>& w, int group_size) {
    Q8Matrix m{{ElementType::q8_0, group_size}, std::vector<std::int8_t>(w.size()),
               std::vector<float>(w.size() / group_size)};
    quantize(m.q.data(), m.scales.data(), w.data(), static_cast<int>(w.size()), group_size);
    return m;
}
std::vector<std::byte> device_rows(const KernelHarness& h, const Q8Matrix& m, int n) {
    std::vector<std::byte> bytes(m.format.bytes(m.q.size()));
    h.kernels.weight_layout().write_rows(bytes.data(), m.tensor(), 0, m.q.size() / n, n);
    return bytes;
}

// Rows of x: random groups and awkward ones: a group whose values over its scale (1) are exact halves, a
// group of zeros and one of negative zeros (0 / 0 quantizes to 0), subnormal maxima where the device has
// subnormals (scales that underflow: x / 0), and a NaN and an infinity (the degenerate scales runq.c's
// build turns into low bytes of INT32_MIN).
std::vector<float> awkward_rows(int positions, int n, int group_size, bool subnormals, std::mt19937& rng) {
    std::vector<float> x = random_vector(static_cast<std::size_t>(positions) * n, rng, -3.0f, 3.0f);
    const int groups = positions * n / group_size;
    for (int g = 0; g < groups; ++g) {
        float* v = x.data() + static_cast<std::size_t>(g) * group_size;
        switch (g % 7) {
            case 1:
                for (int i = 0; i < group_size; ++i) v[i] = (i % 2 ? -1.0f : 1.0f) * (static_cast<float>(i % 127) + 0.5f);
                v[0] = 127.0f;
                break;
            case 2: std::fill(v, v + group_size, 0.0f); break;
            case 3: std::fill(v, v + group_size, -0.0f); break;
            case 4:
                if (subnormals)
                    for (int i = 0; i < group_size; ++i) v[i] *= i % 2 ? 0x1p-130f : 0x1p-149f;
                break;
            case 5: v[group_size / 2] = g % 2 ? kNaN : INFINITY; break;
            default: break;
        }
    }
    return x;
}

TEST_P(Q8VsReference, Q8QuantizeRowsIsRunqsQuantize) {
    struct Case {
        int n, group_size;
    };
    // Groups fewer than, as many as and (1100 / 4) more than a GPU work-group's work-items.
    const Case cases[] = {{48, 4}, {1100, 4}, {36, 12}, {240, 12}, {64, 64}, {384, 64}};
    std::mt19937 rng(81);
    for (const Case& c : cases) {
        KernelHarness& h = q8_harness(GetParam(), c.group_size);
        if (!correctly_rounded_division(h.device)) GTEST_SKIP() << "the device's division is not correctly rounded";
        const bool subnormals = (h.device.device().getInfo<CL_DEVICE_SINGLE_FP_CONFIG>() & CL_FP_DENORM) != 0;
        const int positions = 3;
        SCOPED_TRACE("n " + std::to_string(c.n) + " group size " + std::to_string(c.group_size));
        const auto x = awkward_rows(positions, c.n, c.group_size, subnormals, rng);
        const std::vector<std::byte> want = device_rows(h, quantized(x, c.group_size), c.n);
        const cl::Buffer out_b = h.upload_bytes(std::vector<std::byte>(want.size(), std::byte{0x5a}));
        h.run(h.kernels.quantize_rows, h.kernels.groups(positions), h.upload(x), out_b, c.n, h.kernels.staged_space(c.n));
        const std::vector<std::byte> got = h.download_bytes(out_b, want.size());
        const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
        EXPECT_TRUE(diff.first == got.end()) << "first difference at byte " << (diff.first - got.begin()) << " of "
                                             << got.size() << ": device " << static_cast<int>(*diff.first)
                                             << ", runq.c " << static_cast<int>(*diff.second);
    }
}

TEST_P(Q8VsReference, Q8MatvecResidualIsRunqsMatmul) {
    struct Case {
        int n, rows, group_size;
    };
    const Case cases[] = {{48, 11, 4}, {1100, 3, 4}, {36, 5, 12}, {240, 70, 12}, {256, 65, 64}, {192, 300, 64}};
    const int pad = 7;
    std::mt19937 rng(808);
    for (const Case& c : cases) {
        KernelHarness& h = q8_harness(GetParam(), c.group_size);
        SCOPED_TRACE("n " + std::to_string(c.n) + " rows " + std::to_string(c.rows) + " group size " +
                     std::to_string(c.group_size));
        const Q8Matrix w = quantized(random_vector(static_cast<std::size_t>(c.rows) * c.n, rng), c.group_size);
        const auto in = random_vector(c.n, rng, -2.0f, 2.0f);
        auto x = random_vector(c.rows, rng, -3.0f, 3.0f);
        x.insert(x.end(), pad, kSentinel);

        MatmulInput input(w.format, c.n);
        input.set(in.data());
        std::vector<float> tmp(c.rows), expected(x.begin(), x.begin() + c.rows);
        matmul(tmp.data(), input, w.tensor(), c.rows);
        for (int i = 0; i < c.rows; i++) expected[i] += tmp[i];

        cl::Buffer w_b = h.upload_bytes(device_rows(h, w, c.n)), in_b = h.upload(in), x_b = h.upload(x);
        ASSERT_GT(h.kernels.staged_count(c.n), 0) << "Q8_0 kernels read a staged input";
        h.run(KernelSet::Matvec::matvec_residual, c.rows, c.n, w_b, in_b, x_b, c.n, c.rows,
              h.kernels.staged_space(c.n), h.kernels.staged_count(c.n));
        const auto x_d = h.download(x_b, x.size());
        expect_q8_match(h, true, slice(x_d, 0, c.rows), expected, "x");
        expect_untouched(slice(x_d, c.rows, pad), "x past rows");
    }
}

// matmul of Q8_0 weights on `normed` quantized as runq.c does before every product.
std::vector<float> q8_matmul(const Q8Matrix& w, const std::vector<float>& normed, int rows) {
    MatmulInput input(w.format, static_cast<int>(normed.size()));
    input.set(normed.data());
    std::vector<float> out(rows);
    matmul(out.data(), input, w.tensor(), rows);
    return out;
}

TEST_P(Q8VsReference, Q8NormalizingKernelsQuantizeTheirNorm) {
    const int group_size = 4, dim = 36, n_heads = 6, kv_heads = 2, hidden = 100, vocab = 37, pos = 3, seq_len = 5;
    KernelHarness& h = q8_harness(GetParam(), group_size);
    const int head_size = dim / n_heads, kv_dim = head_size * kv_heads;
    std::mt19937 rng(9);
    const auto x = random_vector(dim, rng, -2.0f, 2.0f), rms_w = random_vector(dim, rng, 0.5f, 1.5f);
    std::vector<float> xn(dim);
    rmsnorm(xn.data(), x.data(), rms_w.data(), dim);
    const auto matrix = [&](int rows) { return quantized(random_vector(static_cast<std::size_t>(rows) * dim, rng), group_size); };
    const Q8Matrix wq = matrix(dim), wk = matrix(kv_dim), wv = matrix(kv_dim), w1 = matrix(hidden), w3 = matrix(hidden),
                   wcls = matrix(vocab);
    const cl::Buffer x_b = h.upload(x), rms_b = h.upload(rms_w);
    const auto upload = [&](const Q8Matrix& m) { return h.upload_bytes(device_rows(h, m, dim)); };

    // attn_qkv_rope: q, and the cache rows at pos.
    const std::size_t cache = static_cast<std::size_t>(seq_len) * kv_dim, at = static_cast<std::size_t>(pos) * kv_dim;
    cl::Buffer q_b = h.upload(std::vector<float>(dim, kSentinel)), xn_b = h.upload(std::vector<float>(dim, kSentinel));
    cl::Buffer kc_b = h.upload(std::vector<float>(cache, kSentinel)), vc_b = h.upload(std::vector<float>(cache, kSentinel));
    h.run(KernelSet::Matvec::attn_qkv_rope, (dim + 2 * kv_dim) / 2, dim, x_b, rms_b, upload(wq), upload(wk), upload(wv),
          h.upload(rope_table(seq_len, head_size)), q_b, kc_b, vc_b, xn_b, dim, kv_dim, head_size, pos,
          h.kernels.staged_space(dim), h.kernels.staged_count(dim));
    const auto xn_d = h.download(xn_b, dim);
    expect_match(h, true, xn_d, xn, "xn");
    std::vector<float> q = q8_matmul(wq, xn_d, dim), k = q8_matmul(wk, xn_d, kv_dim);
    const std::vector<float> v = q8_matmul(wv, xn_d, kv_dim);
    rope(q.data(), k.data(), pos, dim, kv_dim, head_size);
    expect_q8_match(h, true, h.download(q_b, dim), q, "q");
    const auto kc_d = h.download(kc_b, cache), vc_d = h.download(vc_b, cache);
    expect_q8_match(h, true, slice(kc_d, at, kv_dim), k, "key cache row at pos");
    expect_q8_match(h, true, slice(vc_d, at, kv_dim), v, "value cache row at pos");
    expect_untouched(slice(kc_d, 0, at), "key cache rows before pos");

    // ffn_gate_up: hb = silu(w1 . xn) * (w3 . xn).
    cl::Buffer hb_b = h.upload(std::vector<float>(hidden, kSentinel));
    xn_b = h.upload(std::vector<float>(dim, kSentinel));
    h.run(KernelSet::Matvec::ffn_gate_up, hidden, dim, x_b, rms_b, upload(w1), upload(w3), hb_b, xn_b, dim, hidden,
          h.kernels.staged_space(dim), h.kernels.staged_count(dim));
    const auto ffn_xn = h.download(xn_b, dim);
    std::vector<float> hb = q8_matmul(w1, ffn_xn, hidden);
    swiglu(hb.data(), q8_matmul(w3, ffn_xn, hidden).data(), hidden);
    expect_q8_match(h, false, h.download(hb_b, hidden), hb, "hb");  // silu's exp()

    // classifier, normalizing x itself (GPU shapes) or reading the rmsnorm kernel's output (CPU shapes).
    cl::Buffer logits_b = h.upload(std::vector<float>(vocab, kSentinel));
    xn_b = h.upload(std::vector<float>(dim, kSentinel));
    const bool separate = h.kernels.separate_final_norm();
    if (separate) h.run(h.kernels.rmsnorm, h.kernels.rows(1), x_b, rms_b, xn_b, dim);
    h.run(KernelSet::Matvec::classifier, vocab, dim, separate ? xn_b : x_b, separate ? cl::Buffer() : rms_b,
          upload(wcls), logits_b, xn_b, dim, vocab, 0, h.kernels.staged_space(dim), h.kernels.staged_count(dim));
    expect_q8_match(h, true, h.download(logits_b, vocab), q8_matmul(wcls, h.download(xn_b, dim), vocab), "logits");
}

// Greedy decoding's embedding row from a Q8_0 table: runq.c's dequantization, value times scale.
TEST_P(Q8VsReference, Q8GreedyEmbeddingIsTheDequantizedRow) {
    const int group_size = 12, dim = 36, vocab = 50, pos = 2;
    KernelHarness& h = q8_harness(GetParam(), group_size);
    std::mt19937 rng(31);
    const Q8Matrix table = quantized(random_vector(static_cast<std::size_t>(vocab) * dim, rng), group_size);
    auto logits = random_vector(vocab, rng);
    logits[41] = 5.0f;
    const int groups = h.kernels.argmax_groups();
    cl::Buffer logits_b = h.upload(logits), table_b = h.upload_bytes(device_rows(h, table, dim));
    cl::Buffer partial_b = h.device.allocate(static_cast<std::size_t>(groups) * sizeof(cl_int), "partial");
    cl::Buffer tokens_b = h.device.allocate((pos + 2) * sizeof(cl_int), "tokens");
    cl::Buffer x_b = h.upload(std::vector<float>(dim, kSentinel));
    h.run(h.kernels.argmax, h.kernels.groups(groups), logits_b, vocab, partial_b);
    h.run(h.kernels.argmax_embed, h.kernels.groups(1), logits_b, partial_b, groups, 1, tokens_b, pos, table_b, x_b, dim);
    std::vector<float> row(dim);
    dequantize(row.data(), table.tensor().from(41 * dim), dim);
    EXPECT_EQ(h.download(x_b, dim), row);
}

// Prefill's Q8_0 GEMM on quantize_rows' rows: every element runq.c's matmul of the position, on every
// family (each sums its groups in order), stored or added to the residual.
TEST_P(Q8VsReference, Q8GemmIsRunqsMatmulOfEveryPosition) {
    struct Case {
        int n, rows, group_size;
    };
    const Case cases[] = {{48, 11, 4}, {36, 65, 12}, {256, 64, 64}, {128, 130, 64}};
    const int pad = 5;
    std::mt19937 rng(4);
    for (const Case& c : cases) {
        KernelHarness& h = q8_harness(GetParam(), c.group_size);
        for (int positions : {1, 17, 65}) {
            for (int accumulate : {0, 1}) {
                SCOPED_TRACE("n " + std::to_string(c.n) + " rows " + std::to_string(c.rows) + " group size " +
                             std::to_string(c.group_size) + " positions " + std::to_string(positions) +
                             (accumulate ? " accumulating" : " storing"));
                const Q8Matrix w = quantized(random_vector(static_cast<std::size_t>(c.rows) * c.n, rng), c.group_size);
                const auto in = random_vector(static_cast<std::size_t>(positions) * c.n, rng, -2.0f, 2.0f);
                const std::size_t count = static_cast<std::size_t>(positions) * c.rows;
                const auto initial = random_vector(count, rng, -3.0f, 3.0f);
                std::vector<float> out(pad, kSentinel), expected(count);
                out.insert(out.end(), initial.begin(), initial.end());
                out.insert(out.end(), pad, kSentinel);
                for (int p = 0; p < positions; ++p) {
                    const std::vector<float> row(in.begin() + static_cast<std::ptrdiff_t>(p) * c.n,
                                                 in.begin() + static_cast<std::ptrdiff_t>(p + 1) * c.n);
                    const std::vector<float> product = q8_matmul(w, row, c.rows);
                    for (int r = 0; r < c.rows; ++r) {
                        const std::size_t at = static_cast<std::size_t>(p) * c.rows + r;
                        expected[at] = accumulate ? initial[at] + product[r] : product[r];
                    }
                }
                const cl::Buffer xq_b = h.device.allocate(w.format.bytes(count / c.rows * c.n), "quantized rows");
                h.run(h.kernels.quantize_rows, h.kernels.groups(positions), h.upload(in), xq_b, c.n,
                      h.kernels.staged_space(c.n));
                const cl::Buffer out_b = h.upload(out);
                h.run(h.kernels.gemm, h.kernels.gemm_range(c.rows, positions), h.upload_bytes(device_rows(h, w, c.n)),
                      xq_b, out_b, pad, c.n, c.rows, positions, accumulate);
                const auto got = h.download(out_b, out.size());
                if (correctly_rounded_division(h.device))
                    expect_bit_identical(slice(got, pad, count), expected, "out");
                else
                    expect_close(slice(got, pad, count), expected, h.tolerance, "out");
                expect_untouched(slice(got, 0, pad), "out before out_offset");
                expect_untouched(slice(got, pad + count, pad), "out past the last position");
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(KernelShapes, Q8VsReference, ::testing::Values("exact", "cpu", "gpu", "4x16", "2x2"),
                         [](const auto& p) { return p.param; });

INSTANTIATE_TEST_SUITE_P(KernelShapes, KernelVsReference,
                         ::testing::Combine(::testing::Values("exact", "cpu", "gpu", "4x16", "2x2"),
                                            ::testing::Values(ElementType::f32, ElementType::f16)),
                         [](const auto& p) {
                             return std::get<0>(p.param) + "_" + element_name(std::get<1>(p.param));
                         });

}  // namespace

// The register cap fits the asked-for work-groups in the register file a work-group may use, only where
// the device says how large that is and its compiler takes the option, and never below 64 registers.
TEST(RegisterCap, FitsTheWorkGroupsWhereTheCompilerTakesIt) {
    DeviceInfo nvidia;
    nvidia.registers_per_group = 65536;
    nvidia.register_cap_option = true;
    EXPECT_EQ(register_cap_option(nvidia, 2, 256), " -cl-nv-maxrregcount=128");
    EXPECT_EQ(register_cap_option(nvidia, 4, 256), " -cl-nv-maxrregcount=64");
    EXPECT_EQ(register_cap_option(nvidia, 8, 256), "") << "32 registers would spill";
    EXPECT_EQ(register_cap_option(nvidia, 2, 128), "") << "256 registers limit nothing";
    DeviceInfo no_option = nvidia;
    no_option.register_cap_option = false;
    EXPECT_EQ(register_cap_option(no_option, 2, 256), "");
    DeviceInfo no_count = nvidia;
    no_count.registers_per_group = 0;
    EXPECT_EQ(register_cap_option(no_count, 2, 256), "");
}

// The comparisons the checks are made of fail where they should: a single ulp where bits must agree, an
// error past the bound (NaN the worst of all), a written sentinel.
TEST(KernelComparer, FailsOnEveryKindOfMismatch) {
    const std::vector<float> want = {1.0f, -2.0f, 0.5f};
    std::vector<float> ulp = want;
    ulp[1] = std::nextafter(ulp[1], 0.0f);
    const std::vector<float> far = {1.0f, -2.0f, 0.5f + 1e-3f}, nan = {1.0f, kNaN, 0.5f};
    const auto fails = [](const std::function<void(KernelComparer&)>& compare) {
        KernelCheckResult r("comparer");
        KernelComparer cmp(r);
        compare(cmp);
        return !r.passed();
    };
    EXPECT_FALSE(fails([&](KernelComparer& c) { c.bit_identical(want, want, "same"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.bit_identical(ulp, want, "one ulp"); }));
    EXPECT_FALSE(fails([&](KernelComparer& c) { c.close(ulp, want, 1e-5, "one ulp, relative"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.close(far, want, 1e-4, "past the bound"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.close(nan, want, 1e9, "NaN"); }));
    EXPECT_FALSE(fails([&](KernelComparer& c) { c.untouched(std::vector<float>(4, kKernelSentinel), "sentinels"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.untouched(std::vector<float>{kKernelSentinel, 0.0f}, "written"); }));
    KernelCheckResult r("figures");
    KernelComparer cmp(r);
    cmp.close(far, want, 1e-2, "within");
    EXPECT_NEAR(r.max_abs_err, 1e-3, 1e-7);
    EXPECT_DOUBLE_EQ(r.tolerance, 1e-2 * 2.0);  // relative to the largest magnitude
}
