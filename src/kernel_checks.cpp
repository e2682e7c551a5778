#include "llamacl/kernel_checks.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "llamacl/compare.hpp"
#include "llamacl/export.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/sampler.hpp"

namespace llamacl {

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::size_t kMaxFailureLines = 20;  // enough to see the pattern; the rest are counted

std::span<const float> slice(const std::vector<float>& v, std::size_t offset, std::size_t count) {
    return std::span<const float>(v).subspan(offset, count);
}

std::vector<float> sentinels(std::size_t n) { return std::vector<float>(n, kKernelSentinel); }

}  // namespace

namespace {

bool correctly_rounded_division(const Device& d) {
    return (d.device().getInfo<CL_DEVICE_SINGLE_FP_CONFIG>() & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
}

}  // namespace

KernelHarness::KernelHarness(Device& d, const LaunchShape& shape, const WeightFormat& w, bool warp_shuffles,
                             TensorCores tensor_cores, const std::string& build_options, float eps,
                             PromptPrecision precision)
    : device(d),
      kernels(d, shape, w, warp_shuffles, build_options, tensor_cores, eps, precision),
      weights(w),
      norm_eps(eps),
      exact(kernels.shape().exact() && correctly_rounded_division(d)),
      exact_exp(exact && kernels.glibc_expf()),
      exact_products(w.quantized() ? (!kernels.shape().gpu_family() || kernels.shape().ordered) && correctly_rounded_division(d)
                                   : exact),
      exact_gemm(w.quantized() ? correctly_rounded_division(d) : exact),
      tolerance(kernels.shape().exact() ? 1e-5 : 1e-4),
      emulated(tensor_cores == TensorCores::emulated) {}

int KernelHarness::row_length(int n, int multiple) const {
    const int step = weights.quantized() ? std::lcm(multiple, weights.group_size) : multiple;
    return (n + step - 1) / step * step;
}

WeightTensor KernelHarness::Matrix::tensor() const {
    return WeightTensor::encoded(format, stored.data(), static_cast<std::uint64_t>(rows) * n);
}

std::vector<float> KernelHarness::Matrix::widened() const {
    std::vector<float> out(static_cast<std::size_t>(rows) * n);
    dequantize(out.data(), tensor(), out.size());
    return out;
}

KernelHarness::Matrix KernelHarness::upload_matrix(const std::vector<float>& w, int rows, int n) {
    if (w.size() != static_cast<std::size_t>(rows) * n) throw std::logic_error("upload_matrix: not rows x n weights");
    Matrix m{weights, rows, n, std::vector<std::byte>(weights.bytes(w.size())), {}};
    encode_weights(m.stored.data(), w.data(), w.size(), weights);
    std::vector<std::byte> rows_on_device(m.stored.size());
    kernels.weight_layout().write_rows(rows_on_device.data(), m.tensor(), 0, rows, n);
    m.buffer = upload_bytes(rows_on_device);
    return m;
}

void KernelHarness::run(cl::Kernel& kernel, const KernelSignature& signature, const KernelSet::Range& range,
                        std::initializer_list<KernelArg> args) {
    if (args.size() != signature.args.size())
        throw std::logic_error("a check of " + std::string(signature.kernel) + " binds " +
                               std::to_string(args.size()) + " of its " + std::to_string(signature.args.size()) +
                               " arguments");
    bind_args(kernel, signature, args);
    device.queue().enqueueNDRangeKernel(kernel, cl::NullRange, range.global, range.local);
    device.queue().finish();
}

void KernelHarness::run(KernelSet::Matvec which, int rows, int n, std::initializer_list<KernelArg> args) {
    static constexpr const KernelSignature* kSignatures[] = {  // indexed by KernelSet::Matvec
        &signatures::attn_qkv_rope, &signatures::matvec_residual, &signatures::ffn_gate_up, &signatures::classifier};
    const KernelSet::Launch l = kernels.matvec(which, rows, n);
    run(*l.kernel, *kSignatures[static_cast<int>(which)], l.range, args);
}

void KernelHarness::matmul(float* out, const float* x, const Matrix& w) {
    MatmulInput input(w.format, w.n);
    input.set(x);
    llamacl::matmul(out, input, w.tensor(), w.rows);
}

cl::Buffer KernelHarness::gemm_input(const std::vector<float>& in, int positions, int n) {
    const cl::Buffer floats = upload(in);
    if (!weights.quantized()) return floats;
    cl::Buffer quantized = zeroed(weights.input().bytes(static_cast<std::uint64_t>(positions) * n));
    run(kernels.own().quantize_rows, signatures::quantize_rows, kernels.groups(positions),
        {{"x", floats}, {"out", quantized}, {"n", n}, {"staged", kernels.staged_space(n)}});
    return quantized;
}

cl::Buffer KernelHarness::upload(const std::vector<float>& data) {
    cl::Buffer buffer = device.allocate(data.size() * sizeof(float), "kernel check buffer");
    device.queue().enqueueWriteBuffer(buffer, CL_TRUE, 0, data.size() * sizeof(float), data.data());
    return buffer;
}

cl::Buffer KernelHarness::upload_bytes(const std::vector<std::byte>& data) {
    cl::Buffer buffer = device.allocate(data.size(), "kernel check buffer");
    device.queue().enqueueWriteBuffer(buffer, CL_TRUE, 0, data.size(), data.data());
    return buffer;
}

cl::Buffer KernelHarness::zeroed(std::size_t bytes) { return upload_bytes(std::vector<std::byte>(bytes)); }

std::vector<std::byte> KernelHarness::download_bytes(const cl::Buffer& buffer, std::size_t n) {
    std::vector<std::byte> out(n);
    device.queue().enqueueReadBuffer(buffer, CL_TRUE, 0, n, out.data());
    return out;
}

std::vector<float> KernelHarness::download(const cl::Buffer& buffer, std::size_t n) {
    std::vector<float> out(n);
    device.queue().enqueueReadBuffer(buffer, CL_TRUE, 0, n * sizeof(float), out.data());
    return out;
}

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// ---------------------------------------------------------------------------------------------------
// Comparisons.

void KernelComparer::fail(const std::string& line) {
    if (result_.failures.size() < kMaxFailureLines) result_.failures.push_back(context + ": " + line);
    else if (result_.failures.size() == kMaxFailureLines) result_.failures.push_back("... and more");
}

void KernelComparer::record(double err, double bound) {
    const double ratio = bound > 0 ? err / bound : err > 0 ? std::numeric_limits<double>::infinity() : 0;
    if (ratio > worst_ratio_) {
        worst_ratio_ = ratio;
        result_.max_abs_err = err;
        result_.tolerance = bound;
    }
}

bool KernelComparer::expect(bool ok, const std::string& what) {
    if (!ok) fail(what);
    return ok;
}

void KernelComparer::bit_identical(std::span<const float> got, std::span<const float> want, const std::string& what) {
    if (!expect(got.size() == want.size(), what + ": size differs")) return;
    std::size_t mismatches = 0, first = 0;
    double err = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) {
            if (mismatches++ == 0) first = i;
            const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
            err = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(err, e);
        }
    }
    record(err, 0);
    if (mismatches == 0) return;
    const auto ulps = static_cast<long long>(std::bit_cast<std::int32_t>(got[first])) -
                      static_cast<long long>(std::bit_cast<std::int32_t>(want[first]));
    std::ostringstream line;
    line << what << ": " << mismatches << " of " << want.size() << " elements differ from the reference; first at ["
         << first << "]: device " << std::hexfloat << got[first] << " reference " << want[first] << std::defaultfloat
         << " (" << ulps << " ulp)";
    fail(line.str());
}

void KernelComparer::close(std::span<const float> got, std::span<const float> want, double rel, const std::string& what) {
    if (!expect(got.size() == want.size(), what + ": size differs")) return;
    double scale = 0, err = 0;
    std::size_t worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double e = value_error(got[i], want[i]);
        if (e > err) {
            err = e;
            worst = i;
        }
    }
    const double bound = rel * (scale > 0 ? scale : 1.0);
    record(err, bound);
    if (err <= bound) return;
    std::ostringstream line;
    line << what << ": max |device - reference| " << err << " at [" << worst << "] (device " << got[worst]
         << ", reference " << want[worst] << "), bound " << rel << " x max |reference| " << scale;
    fail(line.str());
}

void KernelComparer::match(const KernelHarness& h, bool exact_here, std::span<const float> got,
                           std::span<const float> want, const std::string& what) {
    if (exact_here && h.exact)
        bit_identical(got, want, what);
    else
        close(got, want, h.tolerance, what);
}

void KernelComparer::match_exp(const KernelHarness& h, std::span<const float> got, std::span<const float> want,
                               const std::string& what) {
    match(h, h.exact_exp, got, want, what);
}

void KernelComparer::match_product(const KernelHarness& h, std::span<const float> got, std::span<const float> want,
                                   const std::string& what) {
    if (h.exact_products)
        bit_identical(got, want, what);
    else
        close(got, want, h.tolerance, what);
}

void KernelComparer::untouched(std::span<const float> got, const std::string& what) {
    std::size_t changed = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(kKernelSentinel)) {
            if (changed++ == 0) first = i;
        }
    }
    if (changed == 0) return;
    std::ostringstream line;
    line << what << " must not be written; " << changed << " written, first at [" << first << "] = " << got[first];
    fail(line.str());
}

// ---------------------------------------------------------------------------------------------------
// attn_qkv_rope: rmsnorm + matmul with wq, wk, wv + rope, k and v into the cache row at pos.

KernelCheckResult check_attn_qkv_rope(KernelHarness& h) {
    KernelCheckResult result("attn_qkv_rope");
    KernelComparer cmp(result);
    struct Case {
        int dim, n_heads, n_kv_heads;
    };
    // head sizes 6 (MHA and GQA kv_mul 3), 10 (GQA kv_mul 2), 48 (MQA), 130 (more than some LOCALs)
    const Case cases[] = {{36, 6, 6}, {36, 6, 2}, {40, 4, 2}, {96, 2, 1}, {260, 2, 1}};
    const int seq_len = 9;
    std::mt19937 rng(1234);
    for (const Case& c : cases) {
        const int dim = h.row_length(c.dim, c.n_heads), head_size = dim / c.n_heads, kv_dim = head_size * c.n_kv_heads;
        const cl::Buffer rope_buf = h.upload(rope_table(seq_len, Rope{head_size}));
        for (int pos : {0, 1, 5, seq_len - 1}) {
            std::ostringstream trace;
            trace << "dim " << dim << " heads " << c.n_heads << " kv_heads " << c.n_kv_heads << " head_size " << head_size
                  << " pos " << pos;
            cmp.context = trace.str();
            const auto x = random_vector(dim, rng, -2.0f, 2.0f);
            const auto rms_w = random_vector(dim, rng, 0.5f, 1.5f);
            const auto wq = h.upload_matrix(random_vector(static_cast<std::size_t>(dim) * dim, rng), dim, dim);
            const auto wk = h.upload_matrix(random_vector(static_cast<std::size_t>(kv_dim) * dim, rng), kv_dim, dim);
            const auto wv = h.upload_matrix(random_vector(static_cast<std::size_t>(kv_dim) * dim, rng), kv_dim, dim);

            // device
            const std::size_t cache_size = static_cast<std::size_t>(seq_len) * kv_dim;
            cl::Buffer x_b = h.upload(x), w_b = h.upload(rms_w);
            cl::Buffer q_b = h.upload(sentinels(dim)), kc_b = h.upload(sentinels(cache_size)),
                       vc_b = h.upload(sentinels(cache_size)), xn_b = h.upload(sentinels(dim));
            h.run(KernelSet::Matvec::attn_qkv_rope, (dim + 2 * kv_dim) / 2, dim,
                  {{"x", x_b}, {"rms_weight", w_b}, {"wq", wq.buffer}, {"wk", wk.buffer}, {"wv", wv.buffer},
                   {"rope", rope_buf}, {"q", q_b}, {"key_cache", kc_b}, {"value_cache", vc_b}, {"xn", xn_b},
                   {"dim", dim}, {"kv_dim", kv_dim}, {"head_size", head_size}, {"pos", pos},
                   {"staged", h.kernels.staged_space(dim)}, {"staged_n", h.kernels.staged_count(dim)}});
            const auto q_d = h.download(q_b, dim), xn_d = h.download(xn_b, dim);
            const auto kc_d = h.download(kc_b, cache_size), vc_d = h.download(vc_b, cache_size);
            const std::size_t at = static_cast<std::size_t>(pos) * kv_dim;

            // reference: the products of the xn the kernel wrote (the tolerances' rule for Q8_0)
            std::vector<float> xn(dim), q(dim), k(kv_dim), v(kv_dim);
            rmsnorm(xn.data(), x.data(), rms_w.data(), dim, h.norm_eps);
            KernelHarness::matmul(q.data(), xn_d.data(), wq);
            KernelHarness::matmul(k.data(), xn_d.data(), wk);
            KernelHarness::matmul(v.data(), xn_d.data(), wv);
            rope(q.data(), k.data(), pos, dim, kv_dim, Rope{head_size});

            cmp.match(h, true, xn_d, xn, "xn");
            cmp.match_product(h, q_d, q, "q");
            cmp.match_product(h, slice(kc_d, at, kv_dim), k, "key cache row at pos");
            cmp.match_product(h, slice(vc_d, at, kv_dim), v, "value cache row at pos");
            cmp.untouched(slice(kc_d, 0, at), "key cache rows before pos");
            cmp.untouched(slice(kc_d, at + kv_dim, cache_size - at - kv_dim), "key cache rows after pos");
            cmp.untouched(slice(vc_d, 0, at), "value cache rows before pos");
            cmp.untouched(slice(vc_d, at + kv_dim, cache_size - at - kv_dim), "value cache rows after pos");
        }
    }
    return result;
}

// ---------------------------------------------------------------------------------------------------
// attention: run.c's loop over the cached positions 0..pos, softmax as run.c's.

namespace {

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

void attention_case(KernelHarness& h, KernelComparer& cmp, const AttentionCase& c, const std::vector<int>& positions,
                    int seq_len, unsigned seed) {
    std::mt19937 rng(seed);
    const int kv_dim = c.n_kv_heads * c.head_size, dim = c.n_heads * c.head_size, kv_mul = c.n_heads / c.n_kv_heads;
    const std::size_t cache_size = static_cast<std::size_t>(seq_len) * kv_dim;
    for (int pos : positions) {
        std::ostringstream trace;
        trace << c.kind << ": heads " << c.n_heads << " kv_heads " << c.n_kv_heads << " head_size " << c.head_size
              << " seq_len " << seq_len << " pos " << pos;
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
        const bool fences = h.kernels.chunked_attention();
        std::vector<int> chunk_lengths;
        if (!fences || pos < KernelSet::kScoreCapacity) chunk_lengths.push_back(pos + 1);
        const std::vector<int> split =
            pos < 64 ? std::vector<int>{1, 3, 7, 16} : std::vector<int>{KernelSet::kScoreCapacity, 700};
        if (fences) chunk_lengths.insert(chunk_lengths.end(), split.begin(), split.end());
        // The chunk counts, zero before every launch as the working buffer's are; float zeros are uint zeros.
        cl::Buffer arrivals_b = h.upload(std::vector<float>(c.n_heads, 0.0f));
        for (int chunk_len : chunk_lengths) {
            const int chunks = (pos + chunk_len) / chunk_len;
            cmp.context = trace.str() + ", chunks of " + std::to_string(chunk_len) + " positions: " + std::to_string(chunks);
            cl::Buffer att_b = h.upload(std::vector<float>(static_cast<std::size_t>(c.n_heads) * seq_len, kNaN));
            cl::Buffer out_b = h.upload(std::vector<float>(dim, kNaN));  // any element left unwritten fails
            cl::Buffer partial_b = h.upload(
                std::vector<float>(static_cast<std::size_t>(c.n_heads) * chunks * (c.head_size + 2), kNaN));
            h.run(h.kernels.own().attention, signatures::attention, h.kernels.heads(c.n_heads, chunks),
                  {{"q", q_b}, {"key_cache", k_b}, {"value_cache", v_b}, {"att", att_b}, {"out", out_b},
                   {"partial_out", partial_b}, {"arrivals", arrivals_b}, {"n_heads", c.n_heads},
                   {"head_size", c.head_size}, {"kv_dim", kv_dim}, {"kv_mul", kv_mul}, {"seq_len", seq_len},
                   {"pos", pos}, {"chunk_len", chunk_len}});
            cmp.match_exp(h, h.download(out_b, dim), out, "attention output");
            cmp.expect(h.download(arrivals_b, c.n_heads) == std::vector<float>(c.n_heads, 0.0f),
                       "the last chunk of each head leaves its count at zero for the next launch");
        }
    }
}

}  // namespace

KernelCheckResult check_attention(KernelHarness& h) {
    KernelCheckResult result("attention");
    KernelComparer cmp(result);
    const int seq_len = 40;
    const std::vector<int> positions = {0, 1, 6, 7, 8, 16, 37, seq_len - 1};
    const AttentionCase cases[] = {
        {"MHA", 4, 4, 6},    {"GQA kv_mul 2", 4, 2, 8}, {"GQA kv_mul 3", 6, 2, 48},
        {"MQA", 3, 1, 130},  {"MHA", 2, 2, 130},        {"GQA kv_mul 3", 3, 1, 6},
        {"GQA kv_mul 2", 4, 2, 10},  // 16 / 10: one part, as 130 with LOCAL 256
    };
    unsigned seed = 77;
    for (const AttentionCase& c : cases) attention_case(h, cmp, c, positions, seq_len, seed++);
    return result;
}

KernelCheckResult check_attention_long_context(KernelHarness& h) {
    KernelCheckResult result("attention (long context)");
    KernelComparer cmp(result);
    const int seq_len = KernelSet::kScoreCapacity + 48;
    attention_case(h, cmp, {"GQA kv_mul 2", 4, 2, 8}, {KernelSet::kScoreCapacity - 1, seq_len - 1}, seq_len, 91);
    return result;
}

// ---------------------------------------------------------------------------------------------------
// matvec_residual: x[i] += w[i] . in; rows past `rows` stay untouched.

KernelCheckResult check_matvec_residual(KernelHarness& h) {
    KernelCheckResult result("matvec_residual");
    KernelComparer cmp(result);
    struct Case {
        int n, rows;
    };
    // {1174, 64}: with the GPU shape, whole batches of loads, then a rest of fewer than a batch per
    // work-item (the long batch: 73 elements per work-item); the others take the short batch.
    const Case cases[] = {{37, 11}, {100, 36}, {1, 1}, {3, 5}, {260, 3}, {6, 300}, {64, 17}, {1174, 64}};
    const int pad = 7;  // sentinels after the last row catch writes by clamped rows
    std::mt19937 rng(99);
    for (const Case& shape : cases) {
        const Case c{h.row_length(shape.n), shape.rows};
        cmp.context = "n " + std::to_string(c.n) + " rows " + std::to_string(c.rows);
        const auto w = h.upload_matrix(random_vector(static_cast<std::size_t>(c.rows) * c.n, rng), c.rows, c.n);
        const auto in = random_vector(c.n, rng, -2.0f, 2.0f);
        auto x = random_vector(c.rows, rng, -3.0f, 3.0f);
        x.insert(x.end(), pad, kKernelSentinel);

        // reference: matmul into a temporary, then the residual add, as run.c
        std::vector<float> tmp(c.rows), expected(x.begin(), x.begin() + c.rows);
        KernelHarness::matmul(tmp.data(), in.data(), w);
        for (int i = 0; i < c.rows; i++) expected[i] += tmp[i];

        cl::Buffer in_b = h.upload(in), x_b = h.upload(x);
        h.run(KernelSet::Matvec::matvec_residual, c.rows, c.n,
              {{"w", w.buffer}, {"in", in_b}, {"x", x_b}, {"n", c.n}, {"rows", c.rows},
               {"staged", h.kernels.staged_space(c.n)}, {"staged_n", h.kernels.staged_count(c.n)}});
        const auto x_d = h.download(x_b, x.size());
        cmp.match_product(h, slice(x_d, 0, c.rows), expected, "x");
        cmp.untouched(slice(x_d, c.rows, pad), "x past rows");
    }
    return result;
}

// ---------------------------------------------------------------------------------------------------
// ffn_gate_up: rmsnorm + matmul w1, w3 + swiglu.

KernelCheckResult check_ffn_gate_up(KernelHarness& h) {
    KernelCheckResult result("ffn_gate_up");
    KernelComparer cmp(result);
    struct Case {
        int dim, hidden;
    };
    const Case cases[] = {{36, 100}, {37, 11}, {1, 1}, {100, 37}, {260, 3}, {6, 300}};
    const int pad = 5;
    std::mt19937 rng(4242);
    for (const Case& shape : cases) {
        const Case c{h.row_length(shape.dim), shape.hidden};
        cmp.context = "dim " + std::to_string(c.dim) + " hidden " + std::to_string(c.hidden);
        const auto x = random_vector(c.dim, rng, -2.0f, 2.0f);
        const auto rms_w = random_vector(c.dim, rng, 0.5f, 1.5f);
        const auto w1 = h.upload_matrix(random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng), c.hidden, c.dim);
        const auto w3 = h.upload_matrix(random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng), c.hidden, c.dim);

        cl::Buffer x_b = h.upload(x), w_b = h.upload(rms_w);
        cl::Buffer hb_b = h.upload(sentinels(c.hidden + pad)), xn_b = h.upload(sentinels(c.dim));
        h.run(KernelSet::Matvec::ffn_gate_up, c.hidden, c.dim,
              {{"x", x_b}, {"rms_weight", w_b}, {"w1", w1.buffer}, {"w3", w3.buffer}, {"hb", hb_b}, {"xn", xn_b},
               {"dim", c.dim}, {"hidden_dim", c.hidden}, {"staged", h.kernels.staged_space(c.dim)},
               {"staged_n", h.kernels.staged_count(c.dim)}});
        const auto hb_d = h.download(hb_b, c.hidden + pad), xn_d = h.download(xn_b, c.dim);

        // reference: the products of the xn the kernel wrote
        std::vector<float> xn(c.dim), hb(c.hidden), hb2(c.hidden);
        rmsnorm(xn.data(), x.data(), rms_w.data(), c.dim, h.norm_eps);
        KernelHarness::matmul(hb.data(), xn_d.data(), w1);
        KernelHarness::matmul(hb2.data(), xn_d.data(), w3);
        swiglu(hb.data(), hb2.data(), c.hidden);

        cmp.match(h, true, xn_d, xn, "xn");
        cmp.match_exp(h, slice(hb_d, 0, c.hidden), hb, "hb");  // through silu
        cmp.untouched(slice(hb_d, c.hidden, pad), "hb past hidden_dim");
    }
    return result;
}

// ---------------------------------------------------------------------------------------------------
// classifier: a vocabulary split into blocks, the later block first; xn only from the block at row 0.

KernelCheckResult check_classifier(KernelHarness& h) {
    KernelCheckResult result("classifier");
    KernelComparer cmp(result);
    struct Case {
        int dim, vocab, split;  // blocks [0, split) and [split, vocab)
    };
    const Case cases[] = {{36, 37, 11}, {37, 300, 259}, {1, 5, 1}, {260, 9, 4}, {6, 70, 1}};
    std::mt19937 rng(555);
    for (const Case& shape : cases) {
        const Case c{h.row_length(shape.dim), shape.vocab, shape.split};
        cmp.context = "dim " + std::to_string(c.dim) + " vocab " + std::to_string(c.vocab) + " split at " +
                      std::to_string(c.split);
        const auto x = random_vector(c.dim, rng, -2.0f, 2.0f);
        const auto rms_w = random_vector(c.dim, rng, 0.5f, 1.5f);
        const auto w = random_vector(static_cast<std::size_t>(c.vocab) * c.dim, rng);
        // Each block stored on its own, as the runtime stages the classifier's.
        const std::size_t split_at = static_cast<std::size_t>(c.split) * c.dim;
        const int rows2 = c.vocab - c.split;
        const auto first = h.upload_matrix(std::vector<float>(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(split_at)),
                                           c.split, c.dim);
        const auto second = h.upload_matrix(std::vector<float>(w.begin() + static_cast<std::ptrdiff_t>(split_at), w.end()),
                                            rows2, c.dim);

        const int pad = 3;
        cl::Buffer x_b = h.upload(x), rw_b = h.upload(rms_w);
        cl::Buffer logits_b = h.upload(sentinels(c.vocab + pad)), xn_b = h.upload(sentinels(c.dim));

        // The block at row_base > 0 alone: its rows at the offset, nothing else, and no xn.
        h.run(KernelSet::Matvec::classifier, rows2, c.dim,
              {{"x", x_b}, {"rms_weight", rw_b}, {"w", second.buffer}, {"logits", logits_b}, {"xn", xn_b},
               {"dim", c.dim}, {"rows", rows2}, {"row_base", c.split}, {"staged", h.kernels.staged_space(c.dim)},
               {"staged_n", h.kernels.staged_count(c.dim)}});
        const auto later = h.download(logits_b, c.vocab + pad);
        cmp.untouched(slice(later, 0, c.split), "logits before row_base");
        cmp.untouched(slice(later, c.vocab, pad), "logits past the block");
        cmp.untouched(h.download(xn_b, c.dim), "xn with row_base > 0");

        // Then the block at row 0: the rest of the logits, and xn.
        h.run(KernelSet::Matvec::classifier, c.split, c.dim,
              {{"x", x_b}, {"rms_weight", rw_b}, {"w", first.buffer}, {"logits", logits_b}, {"xn", xn_b},
               {"dim", c.dim}, {"rows", c.split}, {"row_base", 0}, {"staged", h.kernels.staged_space(c.dim)},
               {"staged_n", h.kernels.staged_count(c.dim)}});
        const auto all = h.download(logits_b, c.vocab + pad), xn_d = h.download(xn_b, c.dim);

        // reference: the products of the xn the kernel wrote
        std::vector<float> xn(c.dim), logits(c.vocab);
        rmsnorm(xn.data(), x.data(), rms_w.data(), c.dim, h.norm_eps);
        KernelHarness::matmul(logits.data(), xn_d.data(), first);
        KernelHarness::matmul(logits.data() + c.split, xn_d.data(), second);

        cmp.match(h, true, xn_d, xn, "xn with row_base == 0");
        cmp.match_product(h, slice(later, c.split, rows2), slice(logits, c.split, rows2), "logits of the block at row_base");
        cmp.match_product(h, slice(all, 0, c.vocab), logits, "all logits");
        cmp.untouched(slice(all, c.vocab, pad), "logits past the vocabulary");
    }
    return result;
}

// ---------------------------------------------------------------------------------------------------
// Greedy decoding's argmax and argmax_embed (greedy.cl) against sample_argmax (run.c's rule): ties,
// signed zeros, lengths below and past the launch's work-items; then the chosen token's embedding row in
// x, bit for bit. Logits holding a NaN or an infinity choose kNonFiniteToken and leave x as it was.
// Without `choose` the token already in the sequence stays and its row is embedded.

KernelCheckResult check_greedy_argmax(KernelHarness& h) {
    KernelCheckResult result("argmax_embed");
    KernelComparer cmp(result);
    const std::vector<float> pool = {kNaN, -0.0f, 0.0f, -INFINITY, INFINITY, 1.0f, 2.0f, -1.0f};
    std::mt19937 rng(777);
    const int dim = h.row_length(3), groups = h.kernels.argmax_groups(), pos = 5;
    cl::Buffer partial_b = h.zeroed(static_cast<std::size_t>(groups) * sizeof(cl_int));
    cl::Buffer tokens_b = h.zeroed((pos + 2) * sizeof(cl_int));
    cl::Buffer x_b = h.upload(sentinels(dim));
    const auto read_token = [&] {
        cl_int token = -2;
        h.device.queue().enqueueReadBuffer(tokens_b, CL_TRUE, (pos + 1) * sizeof(cl_int), sizeof token, &token);
        return token;
    };
    const auto row = [&](const std::vector<float>& table, int token) {  // the widened row the kernel writes
        return std::vector<float>(table.begin() + token * dim, table.begin() + (token + 1) * dim);
    };
    const int lengths[] = {1, 2, 3, 5, 8, 31, 257, 600, 4099};
    for (int trial = 0; trial < 120; ++trial) {
        const int n = lengths[trial % std::size(lengths)];
        std::vector<float> logits(n);
        for (float& v : logits) v = pool[rng() % (trial % 2 ? pool.size() : 4)];  // odd: the whole pool
        if (trial % 3 == 0) logits[rng() % n] = 3.0f;                              // one clear maximum
        const bool finite = std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); });
        const int expected = finite ? sample_argmax(logits) : kNonFiniteToken;
        const std::vector<float> x_before = h.download(x_b, dim);
        cmp.context = "trial " + std::to_string(trial) + ", " + std::to_string(n) + " logits, expected " +
                      std::to_string(expected);
        const auto stored = h.upload_matrix(random_vector(static_cast<std::size_t>(n) * dim, rng), n, dim);
        const std::vector<float> table = stored.widened();
        cl::Buffer logits_b = h.upload(logits);
        const cl::Buffer& table_b = stored.buffer;

        h.run(h.kernels.own().argmax, signatures::argmax, h.kernels.groups(groups),
              {{"logits", logits_b}, {"count", n}, {"partial", partial_b}});
        h.run(h.kernels.own().argmax_embed, signatures::argmax_embed, h.kernels.groups(1),
              {{"logits", logits_b}, {"partial", partial_b}, {"groups", groups}, {"choose", 1}, {"tokens", tokens_b},
               {"pos", pos}, {"table", table_b}, {"x", x_b}, {"dim", dim}});
        const cl_int chosen = read_token();
        if (!cmp.expect(chosen == expected, "argmax chose " + std::to_string(chosen))) return result;
        cmp.expect(h.download(x_b, dim) == (finite ? row(table, expected) : x_before),
                   finite ? "x is not the chosen token's embedding row" : "x changed without a token");

        // Without choose: the token in the sequence (the one just chosen, or another written there) stays.
        // The whole buffer, not the one token: Oclgrind's uninitialized-value check takes a host write for
        // all that its buffer holds, so a write at an offset would leave the token uninitialized there.
        std::vector<cl_int> tokens(pos + 2, -1);
        const cl_int forced = tokens[pos + 1] = finite ? (expected + 1) % n : 0;
        h.device.queue().enqueueWriteBuffer(tokens_b, CL_TRUE, 0, tokens.size() * sizeof(cl_int), tokens.data());
        h.run(h.kernels.own().argmax_embed, signatures::argmax_embed, h.kernels.groups(1),
              {{"logits", logits_b}, {"partial", partial_b}, {"groups", groups}, {"choose", 0}, {"tokens", tokens_b},
               {"pos", pos}, {"table", table_b}, {"x", x_b}, {"dim", dim}});
        const cl_int kept = read_token();
        if (!cmp.expect(kept == forced, "without choose the sequence's token " + std::to_string(forced) +
                                            " became " + std::to_string(kept)))
            return result;
        cmp.expect(h.download(x_b, dim) == row(table, forced), "x is not the sequence token's embedding row");
    }
    return result;
}

// ---------------------------------------------------------------------------------------------------
// Prefill's kernels (kernels/prefill.cl): a batch of positions, row-major (positions, width).

namespace {

// The position counts the batch kernels are tried on: one, a few, and either side of the GPU tile (64).
const int kBatchPositions[] = {1, 3, 17, 63, 64, 65};

// A GEMM's launches: on GPU shapes once for each tile gemm_gpu.cl is built for that the device runs (Q8_0's
// portable kernel has its one), on CPU shapes the one; emulated tensor cores take the largest and the
// smallest tile (every count of blocks a warp takes) and two batch sizes, a part of a tile and a whole one.
// (The emulation's matrices and the largest tile take 82 KiB of local memory, more than most GPUs have.)
std::vector<std::optional<GemmTile>> tiles_of(KernelHarness& h) {
    if (!h.kernels.shape().gpu_family() || (h.weights.quantized() && !h.kernels.tensor_cores()))
        return {std::nullopt};
    std::vector<std::optional<GemmTile>> tiles;
    for (const GemmTile& t : kGemmTiles)
        if ((!h.emulated || t == kGemmTiles[0] || t == kOwnGemmTile) && h.kernels.gemm_tile_runs(t)) tiles.push_back(t);
    return tiles;
}
std::vector<int> batch_positions(const KernelHarness& h) {
    if (h.emulated) return {3, 64};
    return {std::begin(kBatchPositions), std::end(kBatchPositions)};
}
std::string describe(const std::optional<GemmTile>& tile) {
    return tile ? ", tile " + std::to_string(tile->rows) + "x" + std::to_string(tile->positions) : "";
}

}  // namespace

// rmsnorm_rows: every position's x normalized with the same weights.
KernelCheckResult check_rmsnorm_rows(KernelHarness& h) {
    KernelCheckResult result("rmsnorm_rows");
    KernelComparer cmp(result);
    std::mt19937 rng(5);
    for (int n : {37, 260}) {
        for (int positions : {1, 3, 17}) {
            cmp.context = "n " + std::to_string(n) + " positions " + std::to_string(positions);
            const auto x = random_vector(static_cast<std::size_t>(positions) * n, rng, -2.0f, 2.0f);
            const auto weight = random_vector(n, rng);
            std::vector<float> expected(x.size());
            for (int p = 0; p < positions; ++p)
                rmsnorm(expected.data() + static_cast<std::size_t>(p) * n, x.data() + static_cast<std::size_t>(p) * n,
                        weight.data(), n, h.norm_eps);
            cl::Buffer x_b = h.upload(x), w_b = h.upload(weight), out_b = h.upload(std::vector<float>(x.size(), kNaN));
            h.run(h.kernels.own().rmsnorm_rows, signatures::rmsnorm_rows, h.kernels.groups(positions),
                  {{"x", x_b}, {"weight", w_b}, {"out", out_b}, {"n", n}});
            cmp.match(h, true, h.download(out_b, x.size()), expected, "out");
        }
    }
    return result;
}

namespace {

// Rows of x in groups: random ones and awkward ones where `degenerate`: a group whose values over its scale
// (1) are exact halves, a group of zeros and one of negative zeros (0 / 0 quantizes to 0), subnormal
// maxima where the device has subnormals (scales that underflow: x / 0), a NaN and an infinity (the
// degenerate scales runq.c's build turns into low bytes of INT32_MIN), and values whose quotients lie
// beside halves (where a quantizer that multiplies by the scale's inverse instead of dividing errs, and
// ggml's, which multiplies, rounds some the other way).
std::vector<float> awkward_rows(std::size_t count, int group_size, bool degenerate, bool subnormals, std::mt19937& rng) {
    std::vector<float> x = random_vector(count, rng, -3.0f, 3.0f);
    for (std::size_t g = 0; degenerate && g < count / group_size; ++g) {
        float* v = x.data() + g * group_size;
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
            case 6: {
                // Values at and beside (scale 1.7 / 127) times a half-integer, whose quotients by the scale
                // lie within an ulp or two of a half-integer.
                const float wmax = 1.7f, scale = wmax / 127.0f;
                for (int i = 1; i < group_size; ++i) {
                    const float half = (static_cast<float>(i % 127) + 0.5f) * scale * (i % 2 ? -1.0f : 1.0f);
                    v[i] = i % 3 == 0 ? half : std::nextafter(half, i % 3 == 1 ? INFINITY : -INFINITY);
                }
                v[0] = wmax;
                break;
            }
            default: break;
        }
    }
    return x;
}

}  // namespace

// quantize_rows: each position's row as the format's rule quantizes it (model_math's quantize), in the
// layout the kernels read weights in (DeviceWeightLayout), bit for bit where division is correctly rounded.
KernelCheckResult check_quantize_rows(KernelHarness& h) {
    KernelCheckResult result("quantize_rows");
    KernelComparer cmp(result);
    const int gs = h.weights.group_size, positions = 3;
    const bool exact = correctly_rounded_division(h.device);
    const bool subnormals = (h.device.device().getInfo<CL_DEVICE_SINGLE_FP_CONFIG>() & CL_FP_DENORM) != 0;
    std::mt19937 rng(81);
    // Groups fewer than, as many as and more than a GPU work-group's work-items, where the row fits the
    // local memory it is staged in.
    for (int groups : {1, 3, 20, 275}) {
        const int n = groups * gs;
        if (!staged_input_fits(h.device.info(), h.kernels.shape(), h.weights, n)) continue;
        cmp.context = "n " + std::to_string(n) + " positions " + std::to_string(positions);
        const std::size_t count = static_cast<std::size_t>(positions) * n, scale_count = count / gs;
        const auto x = awkward_rows(count, gs, exact, subnormals, rng);
        std::vector<std::int8_t> q(count);
        std::vector<float> scales(scale_count);
        quantize_input(q.data(), scales.data(), x.data(), static_cast<int>(count), h.weights);
        const DeviceWeightLayout layout = h.kernels.weight_layout().input();
        std::vector<std::byte> want(layout.format.bytes(count));
        layout.write_rows(want.data(), {layout.format, q.data(), scales.data()}, 0, positions, n);

        const cl::Buffer out_b = h.upload_bytes(std::vector<std::byte>(want.size(), std::byte{0x5a}));
        h.run(h.kernels.own().quantize_rows, signatures::quantize_rows, h.kernels.groups(positions),
              {{"x", h.upload(x)}, {"out", out_b}, {"n", n}, {"staged", h.kernels.staged_space(n)}});
        const std::vector<std::byte> got = h.download_bytes(out_b, want.size());
        if (exact) {
            const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
            cmp.expect(diff.first == got.end(), "first difference from the reference's bytes at byte " +
                                                    std::to_string(diff.first - got.begin()) + " of " +
                                                    std::to_string(got.size()));
            continue;
        }
        // Finite groups only (the rule in kernel_checks.hpp): each value byte, at its place in the layout,
        // the reference's or a neighbouring integer; the scales within 3 ulp of the largest (a 2.5 ulp
        // division), or for ggml's rule, whose scales are halves, within a half's ulp.
        const std::size_t row_bytes = layout.format.bytes(n);
        std::vector<float> got_scales, want_scales;
        for (int p = 0; p < positions; ++p) {
            const std::byte* g = got.data() + p * row_bytes;
            const std::byte* w = want.data() + p * row_bytes;
            for (int i = 0; i < n; ++i)
                if (!cmp.expect(std::abs(static_cast<int>(static_cast<std::int8_t>(g[i])) -
                                         static_cast<int>(static_cast<std::int8_t>(w[i]))) <= 1,
                                "value byte " + std::to_string(i) + " of row " + std::to_string(p) +
                                    " more than 1 from the reference's"))
                    break;
            for (int k = 0; k < groups; ++k) {
                float a = 0, b = 0;
                std::memcpy(&a, g + n + k * sizeof(float), sizeof a);
                std::memcpy(&b, w + n + k * sizeof(float), sizeof b);
                got_scales.push_back(a);
                want_scales.push_back(b);
            }
        }
        cmp.close(got_scales, want_scales, h.weights.rule == QuantRule::ggml ? 0x1p-10 : 3 * 0x1p-23, "scales");
    }
    return result;
}

// gemm: out[p] = w . in[p] for every position, stored or added to the residual, from out_offset on.
KernelCheckResult check_gemm(KernelHarness& h) {
    KernelCheckResult result("gemm");
    KernelComparer cmp(result);
    struct Case {
        int n, rows;
    };
    // Rows below, at and past a GPU tile's halves and tiles (32, 64, 128) and a CPU work-item's four; n
    // short, long and with a tail past the float16 steps and a GPU step's 16 elements.
    const Case cases[] = {{37, 11}, {1, 1}, {3, 65}, {260, 64}, {17, 130}, {64, 5}, {33, 129}};
    const int pad = 7;  // sentinels before and after the output catch writes of clamped rows and positions
    std::mt19937 rng(123);
    for (const std::optional<GemmTile>& tile : tiles_of(h)) {
        for (const Case& shape : cases) {
            const Case c{h.row_length(shape.n), shape.rows};
            for (int positions : batch_positions(h)) {
                const int accumulate = positions % 2;  // stored for some counts, added for the others
                cmp.context = "n " + std::to_string(c.n) + " rows " + std::to_string(c.rows) + " positions " +
                              std::to_string(positions) + (accumulate ? " accumulating" : " storing") + describe(tile);
                const auto w = h.upload_matrix(random_vector(static_cast<std::size_t>(c.rows) * c.n, rng), c.rows, c.n);
                const auto in = random_vector(static_cast<std::size_t>(positions) * c.n, rng, -2.0f, 2.0f);
                const std::size_t count = static_cast<std::size_t>(positions) * c.rows;
                std::vector<float> out = sentinels(pad);
                const auto initial = random_vector(count, rng, -3.0f, 3.0f);
                out.insert(out.end(), initial.begin(), initial.end());
                out.insert(out.end(), pad, kKernelSentinel);

                // reference: matmul per position, then the residual add, as run.c
                std::vector<float> expected(count), tmp(c.rows);
                for (int p = 0; p < positions; ++p) {
                    KernelHarness::matmul(tmp.data(), in.data() + static_cast<std::size_t>(p) * c.n, w);
                    for (int r = 0; r < c.rows; ++r) {
                        const std::size_t at = static_cast<std::size_t>(p) * c.rows + r;
                        expected[at] = accumulate ? initial[at] + tmp[r] : tmp[r];
                    }
                }
                cl::Buffer in_b = h.gemm_input(in, positions, c.n), out_b = h.upload(out);
                const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gemm, {c.rows}, positions, tile);
                h.run(*l.kernel, signatures::gemm, l.range,
                      {{"w", w.buffer}, {"in", in_b}, {"out", out_b}, {"out_offset", pad}, {"n", c.n}, {"rows", c.rows},
                       {"positions", positions}, {"accumulate", accumulate}});
                const auto got = h.download(out_b, out.size());
                if (h.exact_gemm)
                    cmp.bit_identical(slice(got, pad, count), expected, "out");
                else
                    cmp.close(slice(got, pad, count), expected, h.tolerance, "out");
                cmp.untouched(slice(got, 0, pad), "out before out_offset");
                cmp.untouched(slice(got, pad + count, pad), "out past the last position");
            }
        }
    }
    return result;
}

// gemm_qkv_rope (float weights): the batch's q, k, v, RoPE applied at positions pos.., k and v into the
// cache's rows from pos on and nowhere else.
KernelCheckResult check_gemm_qkv_rope(KernelHarness& h) {
    KernelCheckResult result("gemm_qkv_rope");
    KernelComparer cmp(result);
    const int seq_len = 140;
    struct Case {
        int dim, kv_dim, head_size, pos, positions;
    };
    // Matrices shorter than a tile's half, between, and longer than a tile (GQA, MQA, MHA); batches from
    // the start and mid-sequence, either side of the GPU tiles' positions.
    const Case cases[] = {{8, 8, 4, 0, 1},     {24, 8, 8, 5, 17},      {48, 16, 8, 20, 65},
                          {12, 12, 6, 139, 1}, {260, 130, 130, 3, 64}, {136, 68, 34, 7, 129}};
    std::mt19937 rng(8);
    for (const std::optional<GemmTile>& tile : tiles_of(h)) {
        for (const Case& c : cases) {
            cmp.context = "dim " + std::to_string(c.dim) + " kv_dim " + std::to_string(c.kv_dim) + " pos " +
                          std::to_string(c.pos) + " positions " + std::to_string(c.positions) + describe(tile);
            const int dim = c.dim, kv_dim = c.kv_dim;
            const auto in = random_vector(static_cast<std::size_t>(c.positions) * dim, rng, -2.0f, 2.0f);
            const auto wq = h.upload_matrix(random_vector(static_cast<std::size_t>(dim) * dim, rng), dim, dim);
            const auto wk = h.upload_matrix(random_vector(static_cast<std::size_t>(kv_dim) * dim, rng), kv_dim, dim);
            const auto wv = h.upload_matrix(random_vector(static_cast<std::size_t>(kv_dim) * dim, rng), kv_dim, dim);
            const std::size_t cache_size = static_cast<std::size_t>(seq_len) * kv_dim;
            std::vector<float> q_want(static_cast<std::size_t>(c.positions) * dim), k_want(cache_size, kKernelSentinel),
                v_want(cache_size, kKernelSentinel);
            for (int p = 0; p < c.positions; ++p) {
                const float* x = in.data() + static_cast<std::size_t>(p) * dim;
                float* q = q_want.data() + static_cast<std::size_t>(p) * dim;
                float* k = k_want.data() + static_cast<std::size_t>(c.pos + p) * kv_dim;
                KernelHarness::matmul(q, x, wq);
                KernelHarness::matmul(k, x, wk);
                KernelHarness::matmul(v_want.data() + static_cast<std::size_t>(c.pos + p) * kv_dim, x, wv);
                rope(q, k, c.pos + p, dim, kv_dim, Rope{c.head_size});
            }
            cl::Buffer q_b = h.upload(std::vector<float>(q_want.size(), kKernelSentinel));
            cl::Buffer k_b = h.upload(std::vector<float>(cache_size, kKernelSentinel));
            cl::Buffer v_b = h.upload(std::vector<float>(cache_size, kKernelSentinel));
            const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::qkv_rope, {dim, kv_dim, kv_dim}, c.positions, tile);
            h.run(*l.kernel, signatures::gemm_qkv_rope, l.range,
                  {{"wq", wq.buffer}, {"wk", wk.buffer}, {"wv", wv.buffer}, {"in", h.upload(in)},
                   {"rope", h.upload(rope_table(seq_len, Rope{c.head_size}))}, {"q", q_b}, {"key_cache", k_b},
                   {"value_cache", v_b}, {"dim", dim}, {"kv_dim", kv_dim}, {"head_size", c.head_size}, {"pos", c.pos},
                   {"positions", c.positions}});
            cmp.match(h, true, h.download(q_b, q_want.size()), q_want, "q");
            const std::size_t at = static_cast<std::size_t>(c.pos) * kv_dim,
                              count = static_cast<std::size_t>(c.positions) * kv_dim;
            for (const auto& [buffer, want, what] :
                 {std::tuple{&k_b, &k_want, "key cache"}, std::tuple{&v_b, &v_want, "value cache"}}) {
                const auto got = h.download(*buffer, cache_size);
                cmp.match(h, true, slice(got, at, count), slice(*want, at, count), what);
                cmp.untouched(slice(got, 0, at), std::string(what) + " rows before the batch");
                cmp.untouched(slice(got, at + count, cache_size - at - count), std::string(what) + " rows after it");
            }
        }
    }
    return result;
}

// gemm_gate_up (float weights): hb[p] = silu(w1 . in[p]) * (w3 . in[p]), nothing past the batch's rows.
KernelCheckResult check_gemm_gate_up(KernelHarness& h) {
    KernelCheckResult result("gemm_gate_up");
    KernelComparer cmp(result);
    struct Case {
        int dim, hidden;
    };
    const Case cases[] = {{36, 100}, {37, 11}, {1, 1}, {100, 37}, {17, 200}, {6, 65}};
    const int pad = 5;
    std::mt19937 rng(4243);
    for (const std::optional<GemmTile>& tile : tiles_of(h)) {
        for (const Case& c : cases) {
            for (int positions : batch_positions(h)) {
                cmp.context = "dim " + std::to_string(c.dim) + " hidden " + std::to_string(c.hidden) + " positions " +
                              std::to_string(positions) + describe(tile);
                const auto in = random_vector(static_cast<std::size_t>(positions) * c.dim, rng, -2.0f, 2.0f);
                const auto w1 = h.upload_matrix(random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng), c.hidden, c.dim);
                const auto w3 = h.upload_matrix(random_vector(static_cast<std::size_t>(c.hidden) * c.dim, rng), c.hidden, c.dim);
                const std::size_t count = static_cast<std::size_t>(positions) * c.hidden;
                std::vector<float> want(count), up(c.hidden);
                for (int p = 0; p < positions; ++p) {
                    float* hb = want.data() + static_cast<std::size_t>(p) * c.hidden;
                    const float* x = in.data() + static_cast<std::size_t>(p) * c.dim;
                    KernelHarness::matmul(hb, x, w1);
                    KernelHarness::matmul(up.data(), x, w3);
                    swiglu(hb, up.data(), c.hidden);
                }
                cl::Buffer hb_b = h.upload(std::vector<float>(count + pad, kKernelSentinel));
                const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gate_up, {2 * c.hidden}, positions, tile);
                h.run(*l.kernel, signatures::gemm_gate_up, l.range,
                      {{"w1", w1.buffer}, {"w3", w3.buffer}, {"in", h.upload(in)}, {"hb", hb_b}, {"dim", c.dim},
                       {"hidden_dim", c.hidden}, {"positions", positions}});
                const auto got = h.download(hb_b, count + pad);
                cmp.match_exp(h, slice(got, 0, count), want, "hb");
                cmp.untouched(slice(got, count, pad), "hb past the batch");
            }
        }
    }
    return result;
}

// rope_rows: the batch's queries and its keys in the cache (positions pos.. of it) rotated at their
// positions, the cache's other rows untouched.
KernelCheckResult check_rope_rows(KernelHarness& h) {
    KernelCheckResult result("rope_rows");
    KernelComparer cmp(result);
    const int seq_len = 90;
    struct Case {
        int dim, kv_dim, head_size, pos, positions;
    };
    const Case cases[] = {{8, 8, 4, 0, 1}, {24, 8, 8, 5, 17}, {48, 16, 8, 20, 65}, {12, 12, 6, 89, 1}};
    std::mt19937 rng(8);
    for (const Case& c : cases) {
        cmp.context = "dim " + std::to_string(c.dim) + " kv_dim " + std::to_string(c.kv_dim) + " pos " +
                      std::to_string(c.pos) + " positions " + std::to_string(c.positions);
        const auto table = rope_table(seq_len, Rope{c.head_size});
        const auto q = random_vector(static_cast<std::size_t>(c.positions) * c.dim, rng);
        const auto keys = random_vector(static_cast<std::size_t>(seq_len) * c.kv_dim, rng);
        auto q_want = q, keys_want = keys;
        for (int p = 0; p < c.positions; ++p)
            rope(q_want.data() + static_cast<std::size_t>(p) * c.dim,
                 keys_want.data() + static_cast<std::size_t>(c.pos + p) * c.kv_dim, c.pos + p, c.dim, c.kv_dim,
                 Rope{c.head_size});
        cl::Buffer q_b = h.upload(q), k_b = h.upload(keys), t_b = h.upload(table);
        h.run(h.kernels.own().rope_rows, signatures::rope_rows,
              h.kernels.per_position((c.dim + c.kv_dim) / 2, c.positions),
              {{"q", q_b}, {"key_cache", k_b}, {"rope", t_b}, {"dim", c.dim}, {"kv_dim", c.kv_dim},
               {"head_size", c.head_size}, {"pos", c.pos}, {"positions", c.positions}});
        cmp.match(h, true, h.download(q_b, q.size()), q_want, "q");
        // Rows outside the batch's are the input's exactly, so the whole cache is compared bit for bit there.
        const auto k_got = h.download(k_b, keys.size());
        cmp.match(h, true, k_got, keys_want, "key cache");
        const std::size_t before = static_cast<std::size_t>(c.pos) * c.kv_dim;
        cmp.bit_identical(slice(k_got, 0, before), slice(keys, 0, before), "cache rows before the batch");
        const std::size_t after = static_cast<std::size_t>(c.pos + c.positions) * c.kv_dim;
        cmp.bit_identical(slice(k_got, after, keys.size() - after), slice(keys, after, keys.size() - after),
                          "cache rows after the batch");
    }
    return result;
}

// attention_rows: each position pos + p of the batch attends to cache positions 0..pos + p, its own key and
// value included, the batch's later ones (already in the cache) not. The rows past the batch are NaN, so
// a read past its last position poisons the output; a position reading a later one of the batch differs
// from the reference, which stops at its own.
KernelCheckResult check_attention_rows(KernelHarness& h) {
    KernelCheckResult result("attention_rows");
    KernelComparer cmp(result);
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
        cmp.context = std::string(a.kind) + " pos " + std::to_string(c.pos) + " positions " + std::to_string(c.positions);
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
        h.run(h.kernels.own().attention_rows, signatures::attention_rows,
              h.kernels.per_position(a.n_heads, c.positions),
              {{"q", q_b}, {"key_cache", k_b}, {"value_cache", v_b}, {"att", att_b}, {"out", out_b},
               {"n_heads", a.n_heads}, {"head_size", a.head_size}, {"kv_dim", kv_dim}, {"kv_mul", kv_mul},
               {"seq_len", seq_len}, {"pos", c.pos}, {"positions", c.positions}});
        cmp.match_exp(h, h.download(out_b, q.size()), expected, "attention_rows");
        if (!h.kernels.attention_tiles_possible(a.head_size)) continue;
        cl::Buffer tiles_out = h.upload(std::vector<float>(q.size(), kNaN));
        const auto local = h.kernels.attention_tiles_local(a.head_size);
        h.run(h.kernels.own().attention_tiles, signatures::attention_tiles,
              h.kernels.attention_tiles_range(a.n_heads, c.positions),
              {{"q", q_b}, {"key_cache", k_b}, {"value_cache", v_b}, {"out", tiles_out}, {"n_heads", a.n_heads},
               {"head_size", a.head_size}, {"kv_dim", kv_dim}, {"kv_mul", kv_mul}, {"pos", c.pos},
               {"positions", c.positions}, {"queries", local[0]}, {"keys", local[1]}, {"scores", local[2]},
               {"exchange", local[3]}});
        cmp.match_exp(h, h.download(tiles_out, q.size()), expected, "attention_tiles");
    }
    return result;
}

// swiglu: silu(gate) * up, elementwise.
KernelCheckResult check_swiglu(KernelHarness& h) {
    KernelCheckResult result("swiglu");
    KernelComparer cmp(result);
    std::mt19937 rng(13);
    for (int count : {1, 17, 1000}) {
        cmp.context = std::to_string(count) + " elements";
        const auto gate = random_vector(count, rng, -4.0f, 4.0f), up = random_vector(count, rng);
        auto expected = gate;
        swiglu(expected.data(), up.data(), count);
        cl::Buffer g_b = h.upload(gate), u_b = h.upload(up);
        h.run(h.kernels.own().swiglu, signatures::swiglu, h.kernels.per_position(count, 1),
              {{"gate", g_b}, {"up", u_b}, {"count", count}});
        cmp.match_exp(h, h.download(g_b, gate.size()), expected, "swiglu");
    }
    return result;
}

std::vector<KernelCheck> kernel_checks(KernelHarness& h) {
    std::vector<KernelCheck> checks = {check_attn_qkv_rope, check_attention,    check_attention_long_context,
                                       check_matvec_residual, check_ffn_gate_up, check_classifier,
                                       check_greedy_argmax};
    // An ordered shape, and a GPU shape whose smallest GEMM tile does not fit the device, run a prompt
    // position by position, on decode's kernels (KernelSet::prefill_possible): prefill's kernels never run there.
    const LaunchShape& shape = h.kernels.shape();
    if (shape.gpu_family() && (shape.ordered || !h.kernels.gemm_tile_runs(kOwnGemmTile))) return checks;
    // Prefill's, in the order a layer's batch runs them.
    checks.push_back(check_rmsnorm_rows);
    if (h.weights.quantized()) checks.push_back(check_quantize_rows);
    // Float builds fuse RoPE and SwiGLU into their GEMMs; the quantized formats' run them as kernels of their own.
    if (h.weights.quantized())
        for (KernelCheck c : {check_gemm, check_rope_rows, check_attention_rows, check_swiglu}) checks.push_back(c);
    else
        for (KernelCheck c : {check_gemm_qkv_rope, check_attention_rows, check_gemm, check_gemm_gate_up})
            checks.push_back(c);
    return checks;
}

std::vector<KernelCheckResult> check_all_kernels(KernelHarness& h) {
    std::vector<KernelCheckResult> results;
    for (KernelCheck check : kernel_checks(h)) results.push_back(check(h));
    return results;
}

}  // namespace llamacl
