// Every OpenCL kernel of the forward pass, called directly on random inputs of awkward sizes and
// compared with its CPU twin (include/llamacl/reference.hpp, softmax in sampler.hpp), for each launch
// shape the runtime can pick: "exact" (1 work-item per row, run.c's loops), "cpu" (1 work-item per row,
// float16 multiply-adds), "gpu" (16x256, consecutive floats per row's work-items, staged input and tree reductions), and "4x16", "2x2" (small
// groups, so row counts and head sizes straddle them).
//
// Tolerances, and why:
//  * Exact shape (ROW_THREADS == 1, VECTOR_WIDTH == 1), kernels without exp(): BIT-IDENTICAL. Each work-item runs run.c's
//    loops in run.c's order with FP contraction off on both sides, and 1/sqrt and the divisions are
//    correctly rounded (-cl-fp32-correctly-rounded-divide-sqrt, which KernelSet asks for when the
//    device offers it). That covers attn_qkv_rope (q, the key and value cache rows, xn; the RoPE table
//    uses the host's powf/cosf/sinf exactly as the reference's rope() does), matvec_residual, classifier
//    (logits and xn) and ffn_gate_up's xn. Where the device lacks correctly rounded divide/sqrt, these
//    fall back to the relative tolerance below (the exactness claim needs it).
//  * Exact shape, kernels with exp() (attention's softmax, ffn_gate_up's silu): OpenCL's exp() may be up
//    to 3 ulp from glibc's expf, so max |device - reference| <= 1e-5 x max |reference| of the tensor.
//  * Vectorized and GPU shapes ("cpu", "gpu", "4x16", "2x2"): sums are reassociated (16 SIMD partial
//    sums and multiply-adds; lanes, float4, tree reductions, a group-wide sum of squares for RMSNorm,
//    1/sum multiplied in attention), so max |device - reference|
//    <= 1e-4 x max |reference| of the tensor. Inputs are O(1) and dot products short (<= 260 terms), so
//    reassociation error stays ~1e-6 relative; 1e-4 still catches any wrong index or missing term.
//  * Everything the kernel must not touch (other KV-cache rows, elements past `rows`, logits outside the
//    classifier block, xn when row_base > 0) is checked bit for bit against a sentinel.
// Reads past the valid range are detected by filling the cache rows after `pos` with NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "llamacl/device.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/sampler.hpp"

using namespace llamacl;

namespace {

constexpr float kSentinel = -1234.5f;  // "never written"
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------
// Harness: one device, one KernelSet per launch shape (built once per process), buffers, launches.

Device& test_device() {
    static Device device = Device::open("", "");  // PoCL in CI
    return device;
}

struct Harness {
    Device& device;
    KernelSet kernels;
    bool exact;      // the exact shape on a device with correctly rounded divide and sqrt
    double tolerance;  // relative to the tensor's largest magnitude, where not exact
    bool emulated;   // tensor cores emulated: slow, so the GEMM tests take fewer sizes

    Harness(Device& d, const LaunchShape& shape, bool warp_shuffles = true, const WeightFormat& weights = {},
            TensorCores tensor_cores = TensorCores::where_present)
        : device(d),
          kernels(d, shape, weights, warp_shuffles, "", tensor_cores),
          exact(shape.family() == ShapeFamily::exact &&
                (d.device().getInfo<CL_DEVICE_SINGLE_FP_CONFIG>() & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0),
          tolerance(shape.family() == ShapeFamily::exact ? 1e-5 : 1e-4),
          emulated(tensor_cores == TensorCores::emulated) {}

    cl::Buffer upload(const std::vector<float>& data) {
        cl::Buffer buffer = device.allocate(data.size() * sizeof(float), "kernel test buffer");
        device.queue().enqueueWriteBuffer(buffer, CL_TRUE, 0, data.size() * sizeof(float), data.data());
        return buffer;
    }
    cl::Buffer upload_bytes(const std::vector<std::byte>& data) {
        cl::Buffer buffer = device.allocate(data.size(), "kernel test buffer");
        device.queue().enqueueWriteBuffer(buffer, CL_TRUE, 0, data.size(), data.data());
        return buffer;
    }
    std::vector<std::byte> download_bytes(const cl::Buffer& buffer, std::size_t n) {
        std::vector<std::byte> out(n);
        device.queue().enqueueReadBuffer(buffer, CL_TRUE, 0, n, out.data());
        return out;
    }
    std::vector<float> download(const cl::Buffer& buffer, std::size_t n) {
        std::vector<float> out(n);
        device.queue().enqueueReadBuffer(buffer, CL_TRUE, 0, n * sizeof(float), out.data());
        return out;
    }
    template <typename... Args>
    void run(cl::Kernel& kernel, const KernelSet::Range& range, const Args&... args) {
        cl_uint index = 0;
        (kernel.setArg(index++, args), ...);  // the argument order of src/device_forward.cpp
        device.queue().enqueueNDRangeKernel(kernel, cl::NullRange, range.global, range.local);
        device.queue().finish();
    }
    // A matrix-vector kernel as the runtime launches it: the build and range KernelSet::matvec picks for
    // `rows` rows of n elements (widened rows included).
    template <typename... Args>
    void run(KernelSet::Matvec which, int rows, int n, const Args&... args) {
        const KernelSet::Launch l = kernels.matvec(which, rows, n);
        run(*l.kernel, l.range, args...);
    }
};

const std::string kTensorCoresEmulated = "tensor_cores_emulated";

Harness& harness(const std::string& shape_name) {
    static std::map<std::string, std::unique_ptr<Harness>> cache;
    auto& h = cache[shape_name];
    if (!h) {
        Device& device = test_device();
        // "tensor_cores_emulated": the GPU shape with prefill's tensor-core GEMMs, their instruction emulated.
        const bool emulated = shape_name == kTensorCoresEmulated;
        h = std::make_unique<Harness>(device, parse_launch_shape(emulated ? "gpu" : shape_name, device.info()), true,
                                      WeightFormat{}, emulated ? TensorCores::emulated : TensorCores::where_present);
    }
    return *h;
}

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// ---------------------------------------------------------------------------------------------------
// Comparisons.

std::span<const float> slice(const std::vector<float>& v, std::size_t offset, std::size_t count) {
    return std::span<const float>(v).subspan(offset, count);
}

void expect_bit_identical(std::span<const float> got, std::span<const float> want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    std::size_t mismatches = 0, first = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) {
            if (mismatches++ == 0) first = i;
        }
    }
    if (mismatches == 0) return;
    const auto ulps = static_cast<long long>(std::bit_cast<std::int32_t>(got[first])) -
                      static_cast<long long>(std::bit_cast<std::int32_t>(want[first]));
    ADD_FAILURE() << what << ": " << mismatches << " of " << want.size() << " elements differ from the reference; first at ["
                  << first << "]: device " << std::hexfloat << got[first] << " reference " << want[first]
                  << std::defaultfloat << " (" << ulps << " ulp)";
}

void expect_close(std::span<const float> got, std::span<const float> want, double rel, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0, err = 0;
    std::size_t worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double e = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
        if (!(e <= err)) {  // NaN counts as the worst
            err = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
            worst = i;
        }
    }
    const double bound = rel * (scale > 0 ? scale : 1.0);
    EXPECT_LE(err, bound) << what << ": max |device - reference| " << err << " at [" << worst << "] (device "
                          << got[worst] << ", reference " << want[worst] << "), bound " << rel
                          << " x max |reference| " << scale;
}

// Bit-identical where the arithmetic is identical (exact_here and the harness allows it), else within
// the shape's tolerance.
void expect_match(const Harness& h, bool exact_here, std::span<const float> got, std::span<const float> want,
                  const std::string& what) {
    if (exact_here && h.exact)
        expect_bit_identical(got, want, what);
    else
        expect_close(got, want, h.tolerance, what);
}

void expect_untouched(std::span<const float> got, const std::string& what) {
    std::size_t changed = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(kSentinel)) {
            if (changed++ == 0) first = i;
        }
    }
    EXPECT_EQ(changed, 0u) << what << " must not be written; first written at [" << first << "] = "
                           << (got.empty() ? 0.0f : got[first]);
}

class KernelVsReference : public ::testing::TestWithParam<std::string> {
protected:
    Harness& h() { return harness(GetParam()); }
};

// ---------------------------------------------------------------------------------------------------
// attn_qkv_rope: rmsnorm + matmul with wq, wk, wv + rope, k and v into the cache row at pos.

TEST_P(KernelVsReference, AttnQkvRope) {
    Harness& h = this->h();
    struct Case {
        int dim, n_heads, n_kv_heads;
    };
    // head sizes 6 (MHA and GQA kv_mul 3), 10 (GQA kv_mul 2), 48 (MQA), 130 (more than some LOCALs)
    const Case cases[] = {{36, 6, 6}, {36, 6, 2}, {40, 4, 2}, {96, 2, 1}, {260, 2, 1}};
    const int seq_len = 9;
    std::mt19937 rng(1234);
    for (const Case& c : cases) {
        const int head_size = c.dim / c.n_heads, kv_dim = head_size * c.n_kv_heads, dim = c.dim;
        const cl::Buffer rope_buf = h.upload(rope_table(seq_len, head_size));
        for (int pos : {0, 1, 5, seq_len - 1}) {
            std::ostringstream trace;
            trace << "dim " << dim << " heads " << c.n_heads << " kv_heads " << c.n_kv_heads << " head_size " << head_size
                  << " pos " << pos;
            SCOPED_TRACE(trace.str());
            const auto x = random_vector(dim, rng, -2.0f, 2.0f);
            const auto rms_w = random_vector(dim, rng, 0.5f, 1.5f);
            const auto wq = random_vector(static_cast<std::size_t>(dim) * dim, rng);
            const auto wk = random_vector(static_cast<std::size_t>(kv_dim) * dim, rng);
            const auto wv = random_vector(static_cast<std::size_t>(kv_dim) * dim, rng);

            // reference
            std::vector<float> xn(dim), q(dim), k(kv_dim), v(kv_dim);
            rmsnorm(xn.data(), x.data(), rms_w.data(), dim);
            matmul(q.data(), xn.data(), wq.data(), dim, dim);
            matmul(k.data(), xn.data(), wk.data(), dim, kv_dim);
            matmul(v.data(), xn.data(), wv.data(), dim, kv_dim);
            rope(q.data(), k.data(), pos, dim, kv_dim, head_size);

            // device
            const std::size_t cache_size = static_cast<std::size_t>(seq_len) * kv_dim;
            cl::Buffer x_b = h.upload(x), w_b = h.upload(rms_w), wq_b = h.upload(wq), wk_b = h.upload(wk),
                       wv_b = h.upload(wv);
            cl::Buffer q_b = h.upload(std::vector<float>(dim, kSentinel));
            cl::Buffer kc_b = h.upload(std::vector<float>(cache_size, kSentinel));
            cl::Buffer vc_b = h.upload(std::vector<float>(cache_size, kSentinel));
            cl::Buffer xn_b = h.upload(std::vector<float>(dim, kSentinel));
            h.run(KernelSet::Matvec::attn_qkv_rope, (dim + 2 * kv_dim) / 2, dim, x_b, w_b, wq_b, wk_b, wv_b,
                  rope_buf, q_b, kc_b, vc_b, xn_b, dim, kv_dim, head_size, pos, h.kernels.staged_space(dim),
                  h.kernels.staged_count(dim));
            const auto q_d = h.download(q_b, dim), xn_d = h.download(xn_b, dim);
            const auto kc_d = h.download(kc_b, cache_size), vc_d = h.download(vc_b, cache_size);
            const std::size_t at = static_cast<std::size_t>(pos) * kv_dim;

            expect_match(h, true, q_d, q, "q");
            expect_match(h, true, slice(kc_d, at, kv_dim), k, "key cache row at pos");
            expect_match(h, true, slice(vc_d, at, kv_dim), v, "value cache row at pos");
            expect_match(h, true, xn_d, xn, "xn");
            expect_untouched(slice(kc_d, 0, at), "key cache rows before pos");
            expect_untouched(slice(kc_d, at + kv_dim, cache_size - at - kv_dim), "key cache rows after pos");
            expect_untouched(slice(vc_d, 0, at), "value cache rows before pos");
            expect_untouched(slice(vc_d, at + kv_dim, cache_size - at - kv_dim), "value cache rows after pos");
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// attention: run.c's loop over the cached positions 0..pos, softmax as run.c's.

void reference_attention(const std::vector<float>& q, const std::vector<float>& key_cache,
                         const std::vector<float>& value_cache, std::vector<float>& out, int n_heads, int head_size,
                         int kv_dim, int kv_mul, int pos) {
    std::vector<float> att(static_cast<std::size_t>(pos) + 1);
    for (int h = 0; h < n_heads; h++) {
        const float* qh = q.data() + h * head_size;
        const std::size_t kv_off = static_cast<std::size_t>(h / kv_mul) * head_size;
        for (int t = 0; t <= pos; t++) {
            const float* kt = key_cache.data() + static_cast<std::size_t>(t) * kv_dim + kv_off;
            float score = 0.0f;
            for (int i = 0; i < head_size; i++) score += qh[i] * kt[i];
            score /= sqrtf(static_cast<float>(head_size));
            att[t] = score;
        }
        softmax(att);
        float* xb = out.data() + h * head_size;
        for (int i = 0; i < head_size; i++) xb[i] = 0.0f;
        for (int t = 0; t <= pos; t++) {
            const float* vt = value_cache.data() + static_cast<std::size_t>(t) * kv_dim + kv_off;
            const float a = att[t];
            for (int i = 0; i < head_size; i++) xb[i] += a * vt[i];
        }
    }
}

struct AttentionCase {
    const char* kind;
    int n_heads, n_kv_heads, head_size;
};

void check_attention(Harness& h, const AttentionCase& c, const std::vector<int>& positions, int seq_len,
                     unsigned seed) {
    std::mt19937 rng(seed);
    const int kv_dim = c.n_kv_heads * c.head_size, dim = c.n_heads * c.head_size, kv_mul = c.n_heads / c.n_kv_heads;
    const std::size_t cache_size = static_cast<std::size_t>(seq_len) * kv_dim;
    for (int pos : positions) {
        std::ostringstream trace;
        trace << c.kind << ": heads " << c.n_heads << " kv_heads " << c.n_kv_heads << " head_size " << c.head_size
              << " seq_len " << seq_len << " pos " << pos;
        SCOPED_TRACE(trace.str());
        // Scores of O(1) so the softmax is neither flat nor one-hot.
        const auto q = random_vector(dim, rng, -2.0f, 2.0f);
        auto keys = random_vector(cache_size, rng), values = random_vector(cache_size, rng);
        // Rows after pos are not cached yet: NaN there poisons any read of them.
        std::fill(keys.begin() + static_cast<std::ptrdiff_t>(pos + 1) * kv_dim, keys.end(), kNaN);
        std::fill(values.begin() + static_cast<std::ptrdiff_t>(pos + 1) * kv_dim, values.end(), kNaN);

        std::vector<float> out(dim);
        reference_attention(q, keys, values, out, c.n_heads, c.head_size, kv_dim, kv_mul, pos);

        cl::Buffer q_b = h.upload(q), k_b = h.upload(keys), v_b = h.upload(values);
        // One chunk where a head may be one (any length without device fences; with them, at most
        // kScoreCapacity positions, whose scores the work-group keeps in local memory), and where the last
        // of a head's chunks can combine them (GPU shapes built with device fences) chunks of 1, 3, 7 and 16
        // positions in a short context (up to 40 chunks: several of the combine's batches of loads), of the
        // capacity and of 700 in a long one (uneven last chunks included).
        const bool fences = h.kernels.device_fences();
        std::vector<int> chunk_lengths;
        if (!fences || pos < KernelSet::kScoreCapacity) chunk_lengths.push_back(pos + 1);
        const std::vector<int> split =
            pos < 64 ? std::vector<int>{1, 3, 7, 16} : std::vector<int>{KernelSet::kScoreCapacity, 700};
        if (fences) chunk_lengths.insert(chunk_lengths.end(), split.begin(), split.end());
        // The chunk counts, zero before every launch as the working buffer's are; float zeros are uint zeros.
        cl::Buffer arrivals_b = h.upload(std::vector<float>(c.n_heads, 0.0f));
        for (int chunk_len : chunk_lengths) {
            const int chunks = (pos + chunk_len) / chunk_len;
            SCOPED_TRACE("chunks of " + std::to_string(chunk_len) + " positions: " + std::to_string(chunks));
            cl::Buffer att_b = h.upload(std::vector<float>(static_cast<std::size_t>(c.n_heads) * seq_len, kNaN));
            cl::Buffer out_b = h.upload(std::vector<float>(dim, kNaN));  // any element left unwritten fails
            cl::Buffer partial_b = h.upload(
                std::vector<float>(static_cast<std::size_t>(c.n_heads) * chunks * (c.head_size + 2), kNaN));
            h.run(h.kernels.attention, h.kernels.heads(c.n_heads, chunks), q_b, k_b, v_b, att_b, out_b, partial_b,
                  arrivals_b, c.n_heads, c.head_size, kv_dim, kv_mul, seq_len, pos, chunk_len);
            expect_match(h, false, h.download(out_b, dim), out, "attention output");  // exp(): never exact
            EXPECT_EQ(h.download(arrivals_b, c.n_heads), std::vector<float>(c.n_heads, 0.0f))
                << "the last chunk of each head leaves its count at zero for the next launch";
        }
    }
}

TEST_P(KernelVsReference, Attention) {
    Harness& h = this->h();
    const int seq_len = 40;
    const std::vector<int> positions = {0, 1, 6, 7, 8, 16, 37, seq_len - 1};
    const AttentionCase cases[] = {
        {"MHA", 4, 4, 6},    {"GQA kv_mul 2", 4, 2, 8}, {"GQA kv_mul 3", 6, 2, 48},
        {"MQA", 3, 1, 130},  {"MHA", 2, 2, 130},        {"GQA kv_mul 3", 3, 1, 6},
        {"GQA kv_mul 2", 4, 2, 10},  // 16 / 10: one part, as 130 with LOCAL 256
    };
    unsigned seed = 77;
    for (const AttentionCase& c : cases) check_attention(h, c, positions, seq_len, seed++);
}

// A context longer than a chunk's scores may be (KernelSet::kScoreCapacity): the whole capacity in one
// chunk, and past it.
TEST_P(KernelVsReference, AttentionLongContext) {
    const int seq_len = KernelSet::kScoreCapacity + 48;
    check_attention(this->h(), {"GQA kv_mul 2", 4, 2, 8}, {KernelSet::kScoreCapacity - 1, seq_len - 1}, seq_len, 91);
}

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

// ---------------------------------------------------------------------------------------------------
// matvec_residual: x[i] += w[i] . in; rows past `rows` stay untouched.

TEST_P(KernelVsReference, MatvecResidual) {
    Harness& h = this->h();
    struct Case {
        int n, rows;
    };
    // {1174, 64}: with the GPU shape, whole batches of loads, then a rest of fewer than a batch per
    // work-item (the long batch: 73 elements per work-item); the others take the short batch.
    const Case cases[] = {{37, 11}, {100, 36}, {1, 1}, {3, 5}, {260, 3}, {6, 300}, {64, 17}, {1174, 64}};
    const int pad = 7;  // sentinels after the last row catch writes by clamped rows
    std::mt19937 rng(99);
    for (const Case& c : cases) {
        SCOPED_TRACE("n " + std::to_string(c.n) + " rows " + std::to_string(c.rows));
        const auto w = random_vector(static_cast<std::size_t>(c.rows) * c.n, rng);
        const auto in = random_vector(c.n, rng, -2.0f, 2.0f);
        auto x = random_vector(c.rows, rng, -3.0f, 3.0f);
        x.insert(x.end(), pad, kSentinel);

        // reference: matmul into a temporary, then the residual add, as run.c
        std::vector<float> tmp(c.rows), expected(x.begin(), x.begin() + c.rows);
        matmul(tmp.data(), in.data(), w.data(), c.n, c.rows);
        for (int i = 0; i < c.rows; i++) expected[i] += tmp[i];

        cl::Buffer w_b = h.upload(w), in_b = h.upload(in), x_b = h.upload(x);
        h.run(KernelSet::Matvec::matvec_residual, c.rows, c.n, w_b, in_b, x_b, c.n, c.rows,
              h.kernels.staged_space(c.n), h.kernels.staged_count(c.n));
        const auto x_d = h.download(x_b, x.size());
        expect_match(h, true, slice(x_d, 0, c.rows), expected, "x");
        expect_untouched(slice(x_d, c.rows, pad), "x past rows");
    }
}

// ---------------------------------------------------------------------------------------------------
// ffn_gate_up: rmsnorm + matmul w1, w3 + swiglu.

TEST_P(KernelVsReference, FfnGateUp) {
    Harness& h = this->h();
    struct Case {
        int dim, hidden;
    };
    const Case cases[] = {{36, 100}, {37, 11}, {1, 1}, {100, 37}, {260, 3}, {6, 300}};
    const int pad = 5;
    std::mt19937 rng(4242);
    for (const Case& c : cases) {
        SCOPED_TRACE("dim " + std::to_string(c.dim) + " hidden " + std::to_string(c.hidden));
        const auto x = random_vector(c.dim, rng, -2.0f, 2.0f);
        const auto rms_w = random_vector(c.dim, rng, 0.5f, 1.5f);
        const auto w1 = random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng);
        const auto w3 = random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng);

        std::vector<float> xn(c.dim), hb(c.hidden), hb2(c.hidden);
        rmsnorm(xn.data(), x.data(), rms_w.data(), c.dim);
        matmul(hb.data(), xn.data(), w1.data(), c.dim, c.hidden);
        matmul(hb2.data(), xn.data(), w3.data(), c.dim, c.hidden);
        swiglu(hb.data(), hb2.data(), c.hidden);

        cl::Buffer x_b = h.upload(x), w_b = h.upload(rms_w), w1_b = h.upload(w1), w3_b = h.upload(w3);
        cl::Buffer hb_b = h.upload(std::vector<float>(c.hidden + pad, kSentinel));
        cl::Buffer xn_b = h.upload(std::vector<float>(c.dim, kSentinel));
        h.run(KernelSet::Matvec::ffn_gate_up, c.hidden, c.dim, x_b, w_b, w1_b, w3_b, hb_b, xn_b, c.dim, c.hidden,
              h.kernels.staged_space(c.dim), h.kernels.staged_count(c.dim));
        const auto hb_d = h.download(hb_b, c.hidden + pad);
        expect_match(h, false, slice(hb_d, 0, c.hidden), hb, "hb");  // silu's exp(): never exact
        expect_untouched(slice(hb_d, c.hidden, pad), "hb past hidden_dim");
        expect_match(h, true, h.download(xn_b, c.dim), xn, "xn");
    }
}

// ---------------------------------------------------------------------------------------------------
// classifier: a vocabulary split into blocks, the later block first; xn only from the block at row 0.

TEST_P(KernelVsReference, ClassifierBlocks) {
    Harness& h = this->h();
    struct Case {
        int dim, vocab, split;  // blocks [0, split) and [split, vocab)
    };
    const Case cases[] = {{36, 37, 11}, {37, 300, 259}, {1, 5, 1}, {260, 9, 4}, {6, 70, 1}};
    std::mt19937 rng(555);
    for (const Case& c : cases) {
        SCOPED_TRACE("dim " + std::to_string(c.dim) + " vocab " + std::to_string(c.vocab) + " split at " +
                     std::to_string(c.split));
        const auto x = random_vector(c.dim, rng, -2.0f, 2.0f);
        const auto rms_w = random_vector(c.dim, rng, 0.5f, 1.5f);
        const auto w = random_vector(static_cast<std::size_t>(c.vocab) * c.dim, rng);

        std::vector<float> xn(c.dim), logits(c.vocab);
        rmsnorm(xn.data(), x.data(), rms_w.data(), c.dim);
        matmul(logits.data(), xn.data(), w.data(), c.dim, c.vocab);

        const int pad = 3;
        const std::size_t split_at = static_cast<std::size_t>(c.split) * c.dim;
        cl::Buffer x_b = h.upload(x), rw_b = h.upload(rms_w);
        cl::Buffer first_b = h.upload(std::vector<float>(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(split_at)));
        cl::Buffer second_b = h.upload(std::vector<float>(w.begin() + static_cast<std::ptrdiff_t>(split_at), w.end()));
        cl::Buffer logits_b = h.upload(std::vector<float>(c.vocab + pad, kSentinel));
        cl::Buffer xn_b = h.upload(std::vector<float>(c.dim, kSentinel));

        // The block at row_base > 0 alone: its rows at the offset, nothing else, and no xn.
        const int rows2 = c.vocab - c.split;
        h.run(KernelSet::Matvec::classifier, rows2, c.dim, x_b, rw_b, second_b, logits_b, xn_b, c.dim, rows2,
              c.split, h.kernels.staged_space(c.dim), h.kernels.staged_count(c.dim));
        auto got = h.download(logits_b, c.vocab + pad);
        expect_untouched(slice(got, 0, c.split), "logits before row_base");
        expect_match(h, true, slice(got, c.split, rows2), slice(logits, c.split, rows2), "logits of the block at row_base");
        expect_untouched(slice(got, c.vocab, pad), "logits past the block");
        expect_untouched(h.download(xn_b, c.dim), "xn with row_base > 0");

        // Then the block at row 0: the rest of the logits, and xn.
        h.run(KernelSet::Matvec::classifier, c.split, c.dim, x_b, rw_b, first_b, logits_b, xn_b, c.dim, c.split, 0,
              h.kernels.staged_space(c.dim), h.kernels.staged_count(c.dim));
        got = h.download(logits_b, c.vocab + pad);
        expect_match(h, true, slice(got, 0, c.vocab), logits, "all logits");
        expect_untouched(slice(got, c.vocab, pad), "logits past the vocabulary");
        expect_match(h, true, h.download(xn_b, c.dim), xn, "xn with row_base == 0");
    }
}

// ---------------------------------------------------------------------------------------------------
// Greedy decoding's argmax and argmax_embed (greedy.cl) against sample_argmax (run.c's rule, checked
// against run.c's loop in test_sampler.cpp): ties, signed zeros, infinities and NaNs, lengths below and
// past the launch's work-items (on PoCL's few work-groups; a GPU's 264 x 256 take one logit each at
// most); then the chosen token's embedding row in x, bit for bit. Without
// `choose` the token already in the sequence stays and its row is embedded.

TEST_P(KernelVsReference, GreedyArgmaxAndEmbedding) {
    Harness& h = this->h();
    const std::vector<float> pool = {kNaN, -0.0f, 0.0f, -INFINITY, INFINITY, 1.0f, 2.0f, -1.0f};
    std::mt19937 rng(777);
    const int dim = 3, groups = h.kernels.argmax_groups(), pos = 5;
    cl::Buffer partial_b = h.device.allocate(static_cast<std::size_t>(groups) * sizeof(cl_int), "partial");
    cl::Buffer tokens_b = h.device.allocate((pos + 2) * sizeof(cl_int), "tokens");
    cl::Buffer x_b = h.upload(std::vector<float>(dim, kSentinel));
    const auto read_token = [&] {
        cl_int token = -2;
        h.device.queue().enqueueReadBuffer(tokens_b, CL_TRUE, (pos + 1) * sizeof(cl_int), sizeof token, &token);
        return token;
    };
    const int lengths[] = {1, 2, 3, 5, 8, 31, 257, 600, 4099};
    for (int trial = 0; trial < 120; ++trial) {
        const int n = lengths[trial % std::size(lengths)];
        std::vector<float> logits(n);
        for (float& v : logits) v = pool[rng() % (trial % 2 ? pool.size() : 4)];  // odd: the whole pool
        if (trial % 3 == 0) logits[rng() % n] = 3.0f;                              // one clear maximum
        const int expected = sample_argmax(logits);
        SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(n) + " logits, expected " +
                     std::to_string(expected));
        const auto table = random_vector(static_cast<std::size_t>(n) * dim, rng);
        cl::Buffer logits_b = h.upload(logits), table_b = h.upload(table);

        h.run(h.kernels.argmax, h.kernels.groups(groups), logits_b, n, partial_b);
        h.run(h.kernels.argmax_embed, h.kernels.groups(1), logits_b, partial_b, groups, 1, tokens_b, pos, table_b, x_b,
              dim);
        ASSERT_EQ(read_token(), expected);
        const std::vector<float> row(table.begin() + expected * dim, table.begin() + (expected + 1) * dim);
        EXPECT_EQ(h.download(x_b, dim), row);

        // Without choose: the token in the sequence (the one just chosen, or another written there) stays.
        const cl_int forced = (expected + 1) % n;
        h.device.queue().enqueueWriteBuffer(tokens_b, CL_TRUE, (pos + 1) * sizeof(cl_int), sizeof forced, &forced);
        h.run(h.kernels.argmax_embed, h.kernels.groups(1), logits_b, partial_b, groups, 0, tokens_b, pos, table_b, x_b,
              dim);
        ASSERT_EQ(read_token(), forced);
        EXPECT_EQ(h.download(x_b, dim), std::vector<float>(table.begin() + forced * dim, table.begin() + (forced + 1) * dim));
    }
}

// The bound the capacity plan counts: a chunk of at least kMinAttentionChunk keys' elements, at most
// kMaxAttentionChunks chunks, unless a context needs more to keep each within kScoreCapacity positions
// (Config: dim, hidden, layers, heads, kv heads, vocab, seq_len, shared).
// ---------------------------------------------------------------------------------------------------
// Prefill's kernels (kernels/prefill.cl): a batch of positions, row-major (positions, width).

// The position counts every batch kernel is tried on: one, a few, and either side of the GPU tile (64).
const int kBatchPositions[] = {1, 3, 17, 63, 64, 65};

// The GEMMs' launches: on GPU shapes once for each tile gemm_gpu.cl is built for, on CPU shapes the one;
// emulated tensor cores take the largest and the smallest tile (every count of m16n8k8 blocks a warp
// takes), and two batch sizes: a part of a tile and a whole one.
std::vector<std::optional<GemmTile>> tiles_of(const Harness& h) {
    if (!h.kernels.shape().gpu_family()) return {std::nullopt};
    // (The emulation's matrices and the largest tile take 82 KiB of local memory; GPUs have 48 or 64 KiB,
    // and their own tensor cores run every tile on the "gpu" shape where they have them.)
    if (h.emulated && h.device.info().local_mem_bytes < 96 * 1024) return {kOwnGemmTile};
    if (h.emulated) return {kGemmTiles[0], kOwnGemmTile};
    return {std::begin(kGemmTiles), std::end(kGemmTiles)};
}
std::vector<int> batch_positions(const Harness& h) {
    if (h.emulated) return {3, 64};
    return {std::begin(kBatchPositions), std::end(kBatchPositions)};
}
std::string describe(const std::optional<GemmTile>& tile) {
    return tile ? ", tile " + std::to_string(tile->rows) + "x" + std::to_string(tile->positions) : "";
}

// The GEMMs on every shape family and on the tensor-core kernels (emulated here; on NVIDIA's GPUs of
// compute capability 8.0 on, the "gpu" shape runs them for real and the narrower shapes the portable ones).
class GemmVsReference : public KernelVsReference {};

// gemm: out[p] = w . in[p] for every position, stored or added to the residual, from out_offset on.
TEST_P(GemmVsReference, Gemm) {
    Harness& h = this->h();
    struct Case {
        int n, rows;
    };
    // Rows below, at and past a GPU tile's halves and tiles (32, 64, 128) and a CPU work-item's four; n
    // short, long and with a tail past the float16 steps and a GPU step's 16 elements.
    const Case cases[] = {{37, 11}, {1, 1}, {3, 65}, {260, 64}, {17, 130}, {64, 5}, {33, 129}};
    const int pad = 7;  // sentinels before and after the output catch writes of clamped rows and positions
    std::mt19937 rng(123);
    for (const std::optional<GemmTile>& tile : tiles_of(h)) {
        for (const Case& c : cases) {
            for (int positions : batch_positions(h)) {
                const int accumulate = positions % 2;  // stored for some counts, added for the others
                SCOPED_TRACE("n " + std::to_string(c.n) + " rows " + std::to_string(c.rows) + " positions " +
                             std::to_string(positions) + (accumulate ? " accumulating" : " storing") + describe(tile));
                const auto w = random_vector(static_cast<std::size_t>(c.rows) * c.n, rng);
                const auto in = random_vector(static_cast<std::size_t>(positions) * c.n, rng, -2.0f, 2.0f);
                const std::size_t count = static_cast<std::size_t>(positions) * c.rows;
                std::vector<float> out(pad, kSentinel);
                const auto initial = random_vector(count, rng, -3.0f, 3.0f);
                out.insert(out.end(), initial.begin(), initial.end());
                out.insert(out.end(), pad, kSentinel);

                // reference: matmul per position, then the residual add, as run.c
                std::vector<float> expected(count), tmp(c.rows);
                for (int p = 0; p < positions; ++p) {
                    matmul(tmp.data(), in.data() + static_cast<std::size_t>(p) * c.n, w.data(), c.n, c.rows);
                    for (int r = 0; r < c.rows; ++r) {
                        const std::size_t at = static_cast<std::size_t>(p) * c.rows + r;
                        expected[at] = accumulate ? initial[at] + tmp[r] : tmp[r];
                    }
                }
                cl::Buffer w_b = h.upload(w), in_b = h.upload(in), out_b = h.upload(out);
                const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gemm, {c.rows}, positions, tile);
                h.run(*l.kernel, l.range, w_b, in_b, out_b, pad, c.n, c.rows, positions, accumulate);
                const auto got = h.download(out_b, out.size());
                expect_match(h, true, slice(got, pad, count), expected, "out");
                expect_untouched(slice(got, 0, pad), "out before out_offset");
                expect_untouched(slice(got, pad + count, pad), "out past the last position");
            }
        }
    }
}

// gemm_qkv_rope: the batch's q, k, v, RoPE applied at positions pos.., k and v into the cache's rows from
// pos on and nowhere else.
TEST_P(GemmVsReference, GemmQkvRope) {
    Harness& h = this->h();
    const int seq_len = 140;
    struct Case {
        int dim, kv_dim, head_size, pos, positions;
    };
    // Matrices shorter than a tile's half, between, and longer than a tile (GQA, MQA, MHA); batches from
    // the start and mid-sequence, either side of the GPU tiles' positions.
    const Case cases[] = {{8, 8, 4, 0, 1},    {24, 8, 8, 5, 17},   {48, 16, 8, 20, 65},
                          {12, 12, 6, 139, 1}, {260, 130, 130, 3, 64}, {136, 68, 34, 7, 129}};
    std::mt19937 rng(8);
    for (const std::optional<GemmTile>& tile : tiles_of(h)) {
        for (const Case& c : cases) {
            SCOPED_TRACE("dim " + std::to_string(c.dim) + " kv_dim " + std::to_string(c.kv_dim) + " pos " +
                         std::to_string(c.pos) + " positions " + std::to_string(c.positions) + describe(tile));
            const int dim = c.dim, kv_dim = c.kv_dim;
            const auto in = random_vector(static_cast<std::size_t>(c.positions) * dim, rng, -2.0f, 2.0f);
            const auto wq = random_vector(static_cast<std::size_t>(dim) * dim, rng);
            const auto wk = random_vector(static_cast<std::size_t>(kv_dim) * dim, rng);
            const auto wv = random_vector(static_cast<std::size_t>(kv_dim) * dim, rng);
            const std::size_t cache_size = static_cast<std::size_t>(seq_len) * kv_dim;
            std::vector<float> q_want(static_cast<std::size_t>(c.positions) * dim), k_want(cache_size, kSentinel),
                v_want(cache_size, kSentinel);
            for (int p = 0; p < c.positions; ++p) {
                const float* x = in.data() + static_cast<std::size_t>(p) * dim;
                float* q = q_want.data() + static_cast<std::size_t>(p) * dim;
                float* k = k_want.data() + static_cast<std::size_t>(c.pos + p) * kv_dim;
                matmul(q, x, wq.data(), dim, dim);
                matmul(k, x, wk.data(), dim, kv_dim);
                matmul(v_want.data() + static_cast<std::size_t>(c.pos + p) * kv_dim, x, wv.data(), dim, kv_dim);
                rope(q, k, c.pos + p, dim, kv_dim, c.head_size);
            }
            cl::Buffer q_b = h.upload(std::vector<float>(q_want.size(), kSentinel));
            cl::Buffer k_b = h.upload(std::vector<float>(cache_size, kSentinel));
            cl::Buffer v_b = h.upload(std::vector<float>(cache_size, kSentinel));
            const KernelSet::Launch l =
                h.kernels.gemm(KernelSet::Gemm::qkv_rope, {dim, kv_dim, kv_dim}, c.positions, tile);
            h.run(*l.kernel, l.range, h.upload(wq), h.upload(wk), h.upload(wv), h.upload(in),
                  h.upload(rope_table(seq_len, c.head_size)), q_b, k_b, v_b, dim, kv_dim, c.head_size, c.pos,
                  c.positions);
            expect_match(h, true, h.download(q_b, q_want.size()), q_want, "q");
            const std::size_t at = static_cast<std::size_t>(c.pos) * kv_dim,
                              count = static_cast<std::size_t>(c.positions) * kv_dim;
            for (const auto& [buffer, want, what] :
                 {std::tuple{&k_b, &k_want, "key cache"}, std::tuple{&v_b, &v_want, "value cache"}}) {
                const auto got = h.download(*buffer, cache_size);
                expect_match(h, true, slice(got, at, count), slice(*want, at, count), what);
                expect_untouched(slice(got, 0, at), std::string(what) + " rows before the batch");
                expect_untouched(slice(got, at + count, cache_size - at - count), std::string(what) + " rows after it");
            }
        }
    }
}

// gemm_gate_up: hb[p] = silu(w1 . in[p]) * (w3 . in[p]), nothing past the batch's rows.
TEST_P(GemmVsReference, GemmGateUp) {
    Harness& h = this->h();
    struct Case {
        int dim, hidden;
    };
    const Case cases[] = {{36, 100}, {37, 11}, {1, 1}, {100, 37}, {17, 200}, {6, 65}};
    const int pad = 5;
    std::mt19937 rng(4243);
    for (const std::optional<GemmTile>& tile : tiles_of(h)) {
        for (const Case& c : cases) {
            for (int positions : batch_positions(h)) {
                SCOPED_TRACE("dim " + std::to_string(c.dim) + " hidden " + std::to_string(c.hidden) + " positions " +
                             std::to_string(positions) + describe(tile));
                const auto in = random_vector(static_cast<std::size_t>(positions) * c.dim, rng, -2.0f, 2.0f);
                const auto w1 = random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng);
                const auto w3 = random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng);
                const std::size_t count = static_cast<std::size_t>(positions) * c.hidden;
                std::vector<float> want(count), up(c.hidden);
                for (int p = 0; p < positions; ++p) {
                    float* hb = want.data() + static_cast<std::size_t>(p) * c.hidden;
                    const float* x = in.data() + static_cast<std::size_t>(p) * c.dim;
                    matmul(hb, x, w1.data(), c.dim, c.hidden);
                    matmul(up.data(), x, w3.data(), c.dim, c.hidden);
                    swiglu(hb, up.data(), c.hidden);
                }
                cl::Buffer hb_b = h.upload(std::vector<float>(count + pad, kSentinel));
                const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gate_up, {2 * c.hidden}, positions, tile);
                h.run(*l.kernel, l.range, h.upload(w1), h.upload(w3), h.upload(in), hb_b, c.dim, c.hidden, positions);
                const auto got = h.download(hb_b, count + pad);
                expect_match(h, false, slice(got, 0, count), want, "hb");  // silu's exp(): never exact
                expect_untouched(slice(got, count, pad), "hb past the batch");
            }
        }
    }
}

// rmsnorm_rows: every position's x normalized with the same weights.
TEST_P(KernelVsReference, RmsnormRows) {
    Harness& h = this->h();
    std::mt19937 rng(5);
    for (int n : {37, 260}) {
        for (int positions : {1, 3, 17}) {
            SCOPED_TRACE("n " + std::to_string(n) + " positions " + std::to_string(positions));
            const auto x = random_vector(static_cast<std::size_t>(positions) * n, rng, -2.0f, 2.0f);
            const auto weight = random_vector(n, rng);
            std::vector<float> expected(x.size());
            for (int p = 0; p < positions; ++p)
                rmsnorm(expected.data() + static_cast<std::size_t>(p) * n, x.data() + static_cast<std::size_t>(p) * n,
                        weight.data(), n);
            cl::Buffer x_b = h.upload(x), w_b = h.upload(weight), out_b = h.upload(std::vector<float>(x.size(), kNaN));
            h.run(h.kernels.rmsnorm_rows, h.kernels.groups(positions), x_b, w_b, out_b, n);
            expect_match(h, true, h.download(out_b, x.size()), expected, "out");
        }
    }
}

// attention_rows: each position pos + p of the batch attends to cache positions 0..pos + p, its own key and
// value included, the batch's later ones (already in the cache) not. The rows past the batch are NaN, so
// a read past its last position poisons the output; a position reading a later one of the batch differs
// from the reference, which stops at its own.
TEST_P(KernelVsReference, AttentionRows) {
    Harness& h = this->h();
    const int seq_len = 140;
    struct Case {
        AttentionCase heads;
        int pos, positions;  // the batch starts mid-sequence where pos > 0 (after decoded positions)
    };
    // attention_tiles (GPU shapes) too, where it takes the head size: blocks of 32 queries and 32 keys,
    // so batches and caches either side of them.
    const Case cases[] = {{{"MHA", 4, 4, 6}, 0, 1},          {{"GQA kv_mul 2", 4, 2, 8}, 0, 17},
                          {{"GQA kv_mul 3", 6, 2, 48}, 5, 3},  {{"MQA", 3, 1, 130}, 20, 65},
                          {{"GQA kv_mul 2", 4, 2, 10}, 36, 64}, {{"MHA", 2, 2, 6}, 139, 1},
                          {{"GQA kv_mul 4", 8, 2, 64}, 40, 70}, {{"MHA", 2, 2, 128}, 0, 33}};
    std::mt19937 rng(31);
    for (const Case& c : cases) {
        const AttentionCase& a = c.heads;
        SCOPED_TRACE(std::string(a.kind) + " head_size " + std::to_string(a.head_size) + " pos " +
                     std::to_string(c.pos) + " positions " + std::to_string(c.positions));
        const int kv_dim = a.n_kv_heads * a.head_size, dim = a.n_heads * a.head_size, kv_mul = a.n_heads / a.n_kv_heads;
        const std::size_t cache_size = static_cast<std::size_t>(seq_len) * kv_dim;
        const auto q = random_vector(static_cast<std::size_t>(c.positions) * dim, rng, -2.0f, 2.0f);
        auto keys = random_vector(cache_size, rng), values = random_vector(cache_size, rng);
        const int end = c.pos + c.positions;
        std::fill(keys.begin() + static_cast<std::ptrdiff_t>(end) * kv_dim, keys.end(), kNaN);
        std::fill(values.begin() + static_cast<std::ptrdiff_t>(end) * kv_dim, values.end(), kNaN);
        std::vector<float> expected(q.size()), one_q(dim), one_out(dim);
        for (int p = 0; p < c.positions; ++p) {
            std::copy_n(q.begin() + static_cast<std::ptrdiff_t>(p) * dim, dim, one_q.begin());
            reference_attention(one_q, keys, values, one_out, a.n_heads, a.head_size, kv_dim, kv_mul, c.pos + p);
            std::copy(one_out.begin(), one_out.end(), expected.begin() + static_cast<std::ptrdiff_t>(p) * dim);
        }
        cl::Buffer q_b = h.upload(q), k_b = h.upload(keys), v_b = h.upload(values);
        cl::Buffer att_b = h.upload(std::vector<float>(static_cast<std::size_t>(c.positions) * a.n_heads * seq_len, kNaN));
        cl::Buffer out_b = h.upload(std::vector<float>(q.size(), kNaN));
        h.run(h.kernels.attention_rows, h.kernels.per_position(a.n_heads, c.positions), q_b, k_b, v_b, att_b, out_b,
              a.n_heads, a.head_size, kv_dim, kv_mul, seq_len, c.pos, c.positions);
        expect_match(h, false, h.download(out_b, q.size()), expected, "attention_rows");  // exp(): never exact
        if (!h.kernels.attention_tiles_possible(a.head_size)) continue;
        cl::Buffer tiles_out = h.upload(std::vector<float>(q.size(), kNaN));
        const auto local = h.kernels.attention_tiles_local(a.head_size);
        h.run(h.kernels.attention_tiles, h.kernels.attention_tiles_range(a.n_heads, c.positions), q_b, k_b, v_b,
              tiles_out, a.n_heads, a.head_size, kv_dim, kv_mul, c.pos, c.positions, local[0], local[1], local[2],
              local[3]);
        expect_match(h, false, h.download(tiles_out, q.size()), expected, "attention_tiles");
    }
}

// attention_tiles takes every head size up to its bound, on GPU shapes only.
TEST(AttentionTiles, GpuShapesUpToTheHeadBound) {
    Device& device = test_device();
    const KernelSet gpu(device, parse_launch_shape("gpu", device.info()));
    for (int head_size : {1, 6, 48, 64, 127, KernelSet::kAttentionTilesHeadMax})
        EXPECT_TRUE(gpu.attention_tiles_possible(head_size)) << head_size;
    EXPECT_FALSE(gpu.attention_tiles_possible(KernelSet::kAttentionTilesHeadMax + 1));
    const KernelSet cpu(device, parse_launch_shape("cpu", device.info()));
    EXPECT_FALSE(cpu.attention_tiles_possible(64));
}

TEST(MaxAttentionChunks, CappedUntilChunksWouldOutgrowTheScoreCapacity) {
    const int per_chunk = KernelSet::kMinAttentionChunk / 64;  // positions, with head_size 64 below
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, per_chunk - 1, true}), 1);
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, 3 * per_chunk + 5, true}), 3);
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, 100 * per_chunk, true}), KernelSet::kMaxAttentionChunks);
    const int beyond = KernelSet::kMaxAttentionChunks * KernelSet::kScoreCapacity + 1;
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, beyond, true}), KernelSet::kMaxAttentionChunks + 1);
}

// The rule that chooses a GEMM's tile: the largest that gives each of the 132 compute units (an H200) a
// work-group, else the one with the most work-groups; blocks per matrix, each matrix's rows rounded up.
TEST(GemmTile, LargestTileThatGivesEveryComputeUnitAWorkGroup) {
    EXPECT_EQ(gemm_blocks({2048, 512, 512}, 128), 24);
    EXPECT_EQ(gemm_blocks({288, 288, 288}, 128), 9);  // 3 blocks each, the last of each part-filled
    EXPECT_EQ(gemm_tile({2 * 8192}, 512, 132), (GemmTile{128, 128}));      // 1B's gate_up: 512 groups
    EXPECT_EQ(gemm_tile({2048, 512, 512}, 512, 132), (GemmTile{128, 64}));  // 1B's qkv: 96, then 192
    EXPECT_EQ(gemm_tile({2048}, 512, 132), (GemmTile{64, 64}));             // 1B's wo: 64, 128, then 256
    EXPECT_EQ(gemm_tile({768}, 512, 132), (GemmTile{64, 64}));              // 110M's wo: 96 at most
    EXPECT_EQ(gemm_tile({5}, 1, 132), (GemmTile{128, 128}));                // one group whichever: the largest
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
// Tensor cores: prefill's GEMMs with split TF32 operands (3xTF32) stay within fp32's error bound for a
// dot product of n terms, |error| <= (2 n 2^-24 + 2^-20) sum |w x| (summation with rounding or, in a
// tensor core's adder, truncation; the operands' split, about 2^-22 of each product twice over), which
// products of plain TF32 operands (2^-11 each) miss. The "gpu" shape runs them for real on NVIDIA's GPUs
// of compute capability 8.0 on, the portable kernels elsewhere; the emulation everywhere.
TEST(TensorCores, SplitOperandsKeepFp32Accuracy) {
    const int n = 200, rows = 130, positions = 65;
    std::mt19937 rng(77);
    const auto w = random_vector(static_cast<std::size_t>(rows) * n, rng);
    const auto in = random_vector(static_cast<std::size_t>(positions) * n, rng, -2.0f, 2.0f);
    const auto bound_ratio = [&](const std::function<double(int, int)>& value) {
        double worst = 0;
        for (int p = 0; p < positions; ++p) {
            for (int r = 0; r < rows; ++r) {
                double exact = 0, magnitude = 0;
                for (int k = 0; k < n; ++k) {
                    const double term = static_cast<double>(w[static_cast<std::size_t>(r) * n + k]) *
                                        in[static_cast<std::size_t>(p) * n + k];
                    exact += term;
                    magnitude += std::fabs(term);
                }
                const double bound = (2.0 * n * std::ldexp(1.0, -24) + std::ldexp(1.0, -20)) * magnitude;
                worst = std::max(worst, std::fabs(value(p, r) - exact) / bound);
            }
        }
        return worst;
    };
    // The bound tells plain TF32 from fp32: products of operands rounded to TF32 exceed it.
    const auto tf32 = [](float x) {
        return std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) + 0x1000u) & 0xffffe000u);
    };
    EXPECT_GT(bound_ratio([&](int p, int r) {
                  double sum = 0;
                  for (int k = 0; k < n; ++k)
                      sum += static_cast<double>(tf32(w[static_cast<std::size_t>(r) * n + k])) *
                             tf32(in[static_cast<std::size_t>(p) * n + k]);
                  return sum;
              }),
              1.0);
    for (const std::string& shape : {std::string("gpu"), kTensorCoresEmulated}) {
        Harness& h = harness(shape);
        SCOPED_TRACE(shape + (h.kernels.tensor_cores() ? ": tensor cores" : ": portable kernels"));
        cl::Buffer out = h.upload(std::vector<float>(static_cast<std::size_t>(positions) * rows, kNaN));
        const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gemm, {rows}, positions);
        h.run(*l.kernel, l.range, h.upload(w), h.upload(in), out, 0, n, rows, positions, 0);
        const auto got = h.download(out, static_cast<std::size_t>(positions) * rows);
        EXPECT_LE(bound_ratio([&](int p, int r) { return got[static_cast<std::size_t>(p) * rows + r]; }), 1.0);
    }
}

// ---------------------------------------------------------------------------------------------------
// Warp shuffles (NVIDIA): the GPU shape's reductions combine a row's lanes, a score's slices and a
// work-group's last 32 partial results by shuffles instead of local memory, adding the same pairs in the
// same order, so every output must be the same bits as the local-memory trees' build gives.

TEST(WarpShuffles, SameBitsAsLocalMemoryTrees) {
    Device& device = test_device();
    const LaunchShape shape = parse_launch_shape("gpu", device.info());
    Harness shuffles(device, shape), trees(device, shape, false);
    if (!shuffles.kernels.warp_shuffles())
        GTEST_SKIP() << device.info().name << " offers no warp shuffles (NVIDIA's 32-wide warps): nothing to compare";
    ASSERT_FALSE(trees.kernels.warp_shuffles());
    std::mt19937 rng(2024);
    // (Both builds' outputs are also checked against the reference: KernelShapes/KernelVsReference.gpu.)
    const auto same = [&](const std::function<cl::Buffer(Harness&)>& run, std::size_t n, const std::string& what) {
        const std::vector<float> got = shuffles.download(run(shuffles), n);
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); })) << what;
        expect_bit_identical(got, trees.download(run(trees), n), what);
    };
    // attn_qkv_rope (the RMSNorm's group sum, each row pair's lane sums) and matvec_residual (a row's lane
    // sums), with rows enough that the launch keeps rows of at most a warp's lanes (widened_row_threads).
    const int dim = 2048, head_size = 64, rows = 4096, n = 512;
    const auto x = random_vector(dim, rng, -2.0f, 2.0f), norm = random_vector(dim, rng, 0.5f, 1.5f);
    const auto wq = random_vector(static_cast<std::size_t>(dim) * dim, rng);
    const auto rope = rope_table(1, head_size);
    same([&](Harness& h) {
        cl::Buffer q = h.upload(std::vector<float>(dim, kSentinel)), xn = h.upload(std::vector<float>(dim));
        cl::Buffer keys = h.upload(std::vector<float>(dim)), values = h.upload(std::vector<float>(dim));
        const cl::Buffer w = h.upload(wq);
        h.run(KernelSet::Matvec::attn_qkv_rope, (3 * dim) / 2, dim, h.upload(x), h.upload(norm), w, w, w,
              h.upload(rope), q, keys, values, xn, dim, dim, head_size, 0, h.kernels.staged_space(dim),
              h.kernels.staged_count(dim));
        return q;
    }, dim, "attn_qkv_rope's q");
    const auto w = random_vector(static_cast<std::size_t>(rows) * n, rng), in = random_vector(n, rng);
    const auto residual = random_vector(rows, rng);
    same([&](Harness& h) {
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
        same([&](Harness& h) {
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

bool correctly_rounded_division(Device& device) {
    return (device.device().getInfo<CL_DEVICE_SINGLE_FP_CONFIG>() & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
}

Harness& q8_harness(const std::string& shape_name, int group_size) {
    static std::map<std::pair<std::string, int>, std::unique_ptr<Harness>> cache;
    auto& h = cache[{shape_name, group_size}];
    if (!h) {
        Device& device = test_device();
        h = std::make_unique<Harness>(device, parse_launch_shape(shape_name, device.info()), true,
                                      WeightFormat{ElementType::q8_0, group_size});
    }
    return *h;
}

// Whether the Q8_0 kernels of h sum a row's groups in runq.c's order (bit for bit).
bool q8_in_order(Harness& h) { return !h.kernels.shape().gpu_family() && correctly_rounded_division(h.device); }

void expect_q8_match(Harness& h, bool exact_here, std::span<const float> got, std::span<const float> want,
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
std::vector<std::byte> device_rows(const Harness& h, const Q8Matrix& m, int n) {
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

TEST_P(KernelVsReference, Q8QuantizeRowsIsRunqsQuantize) {
    struct Case {
        int n, group_size;
    };
    // Groups fewer than, as many as and (1100 / 4) more than a GPU work-group's work-items.
    const Case cases[] = {{48, 4}, {1100, 4}, {36, 12}, {240, 12}, {64, 64}, {384, 64}};
    std::mt19937 rng(81);
    for (const Case& c : cases) {
        Harness& h = q8_harness(GetParam(), c.group_size);
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

TEST_P(KernelVsReference, Q8MatvecResidualIsRunqsMatmul) {
    struct Case {
        int n, rows, group_size;
    };
    const Case cases[] = {{48, 11, 4}, {1100, 3, 4}, {36, 5, 12}, {240, 70, 12}, {256, 65, 64}, {192, 300, 64}};
    const int pad = 7;
    std::mt19937 rng(808);
    for (const Case& c : cases) {
        Harness& h = q8_harness(GetParam(), c.group_size);
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

TEST_P(KernelVsReference, Q8NormalizingKernelsQuantizeTheirNorm) {
    const int group_size = 4, dim = 36, n_heads = 6, kv_heads = 2, hidden = 100, vocab = 37, pos = 3, seq_len = 5;
    Harness& h = q8_harness(GetParam(), group_size);
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
TEST_P(KernelVsReference, Q8GreedyEmbeddingIsTheDequantizedRow) {
    const int group_size = 12, dim = 36, vocab = 50, pos = 2;
    Harness& h = q8_harness(GetParam(), group_size);
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
TEST_P(KernelVsReference, Q8GemmIsRunqsMatmulOfEveryPosition) {
    struct Case {
        int n, rows, group_size;
    };
    const Case cases[] = {{48, 11, 4}, {36, 65, 12}, {256, 64, 64}, {128, 130, 64}};
    const int pad = 5;
    std::mt19937 rng(4);
    for (const Case& c : cases) {
        Harness& h = q8_harness(GetParam(), c.group_size);
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
                const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gemm, {c.rows}, positions);
                h.run(*l.kernel, l.range, h.upload_bytes(device_rows(h, w, c.n)), xq_b, out_b, pad, c.n, c.rows,
                      positions, accumulate);
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
// Q8_0's prefill runs RoPE and SwiGLU after its products (prefill_q8.cl). rope_rows: the batch's queries
// and its keys in the cache (positions pos.. of it) rotated at their positions, the cache's other rows
// untouched.
TEST_P(KernelVsReference, Q8RopeRows) {
    Harness& h = q8_harness(GetParam(), 4);
    const int seq_len = 90;
    struct Case {
        int dim, kv_dim, head_size, pos, positions;
    };
    const Case cases[] = {{8, 8, 4, 0, 1}, {24, 8, 8, 5, 17}, {48, 16, 8, 20, 65}, {12, 12, 6, 89, 1}};
    std::mt19937 rng(8);
    for (const Case& c : cases) {
        SCOPED_TRACE("dim " + std::to_string(c.dim) + " kv_dim " + std::to_string(c.kv_dim) + " pos " +
                     std::to_string(c.pos) + " positions " + std::to_string(c.positions));
        const auto table = rope_table(seq_len, c.head_size);
        const auto q = random_vector(static_cast<std::size_t>(c.positions) * c.dim, rng);
        const auto keys = random_vector(static_cast<std::size_t>(seq_len) * c.kv_dim, rng);
        auto q_want = q, keys_want = keys;
        for (int p = 0; p < c.positions; ++p)
            rope(q_want.data() + static_cast<std::size_t>(p) * c.dim,
                 keys_want.data() + static_cast<std::size_t>(c.pos + p) * c.kv_dim, c.pos + p, c.dim, c.kv_dim,
                 c.head_size);
        cl::Buffer q_b = h.upload(q), k_b = h.upload(keys), t_b = h.upload(table);
        h.run(h.kernels.rope_rows, h.kernels.per_position((c.dim + c.kv_dim) / 2, c.positions), q_b, k_b, t_b, c.dim,
              c.kv_dim, c.head_size, c.pos, c.positions);
        expect_match(h, true, h.download(q_b, q.size()), q_want, "q");
        // Rows outside the batch's are the input's exactly, so the whole cache is compared bit for bit there.
        const auto k_got = h.download(k_b, keys.size());
        expect_match(h, true, k_got, keys_want, "key cache");
        const std::size_t before = static_cast<std::size_t>(c.pos) * c.kv_dim;
        expect_bit_identical(slice(k_got, 0, before), slice(keys, 0, before), "cache rows before the batch");
        const std::size_t after = static_cast<std::size_t>(c.pos + c.positions) * c.kv_dim;
        expect_bit_identical(slice(k_got, after, keys.size() - after), slice(keys, after, keys.size() - after),
                             "cache rows after the batch");
    }
}

// swiglu (Q8_0's prefill): silu(gate) * up, elementwise.
TEST_P(KernelVsReference, Q8Swiglu) {
    Harness& h = q8_harness(GetParam(), 4);
    std::mt19937 rng(13);
    for (int count : {1, 17, 1000}) {
        const auto gate = random_vector(count, rng, -4.0f, 4.0f), up = random_vector(count, rng);
        auto expected = gate;
        swiglu(expected.data(), up.data(), count);
        cl::Buffer g_b = h.upload(gate), u_b = h.upload(up);
        h.run(h.kernels.swiglu, h.kernels.per_position(count, 1), g_b, u_b, count);
        expect_match(h, false, h.download(g_b, gate.size()), expected, "swiglu");  // exp(): never exact
    }
}


INSTANTIATE_TEST_SUITE_P(KernelShapes, KernelVsReference, ::testing::Values("exact", "cpu", "gpu", "4x16", "2x2"),
                         [](const auto& p) { return p.param; });
INSTANTIATE_TEST_SUITE_P(KernelShapes, GemmVsReference,
                         ::testing::Values("exact", "cpu", "gpu", "4x16", "2x2", kTensorCoresEmulated),
                         [](const auto& p) { return p.param; });

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
