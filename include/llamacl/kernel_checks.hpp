#pragma once
// Every OpenCL kernel of the forward pass, decode and prefill, called directly on seeded random inputs of
// awkward sizes and compared with its CPU twin (model_math.hpp, softmax in sampler.hpp), for one launch
// shape and one weight format: what the kernel tests (tests/test_kernels.cpp) assert for each and what
// `llama-cl check` runs on the chosen device. The matrices are drawn as floats and stored in the format
// (encode_weights, as --weights converts a checkpoint); the reference multiplies what is stored. Tolerances,
// and why:
//  * Exact shape (one work-item per row, run.c's loops) on a device with correctly rounded divide and
//    sqrt, kernels without exp(): BIT-IDENTICAL. Each work-item runs run.c's loops in run.c's order with
//    FP contraction off on both sides (attn_qkv_rope, matvec_residual, classifier, ffn_gate_up's xn, gemm,
//    rmsnorm_rows, rope_rows). Without correctly rounded divide and sqrt these fall back to the relative
//    tolerance below.
//  * Exact shape, kernels with exp() (attention's softmax, ffn_gate_up's and swiglu's silu): the same where
//    the device has doubles (glibc's expf, kernels/expf.cl); without, OpenCL's exp() may be up to 3 ulp
//    from glibc's expf, so max |device - reference| <= 1e-5 x max |reference| of the tensor.
//  * Every other shape: sums are reassociated (SIMD partial sums, lanes, tree reductions, 1/sum
//    multiplied in attention), so max |device - reference| <= 1e-4 x max |reference|. Inputs are O(1)
//    and dot products short (<= 1174 terms), so reassociation error stays ~1e-6 relative; 1e-4 still
//    catches any wrong index or missing term.
//  * Quantized weights: the reference multiplies the same integers. MatmulInput quantizes an input as the
//    kernels quantize what they stage (the format's rule: runq.c's quantize or ggml's, model_math.hpp),
//    and each group's term is the rule's on both sides; the normalizing kernels' products are
//    the reference's of the xn the kernel wrote (compared with rmsnorm's on its own: a last-bit
//    difference there rounds a value to another integer, the RMSNorm's error, not the product's). A
//    group's integer dot is exact, so where division is correctly rounded (the quantization's max / 127
//    and x / scale, or ggml's 1 / scale) the products are BIT-IDENTICAL on the CPU families, whose
//    work-item per row adds the groups' terms in the reference's order, and every family's gemm (each
//    element the reference's matmul); the GPU
//    family's matrix-vector lanes add their groups' sums in a tree: the relative 1e-4 above, by the same
//    argument (n / group size terms reassociated). quantize_rows' bytes are the reference's bit for bit
//    there, degenerate groups included; without correctly rounded division each value may round to the
//    neighbouring integer and each scale be 3 ulp off (OpenCL's 2.5 ulp division; ggml's half scales a
//    half's ulp), finite groups only.
//  * Everything a kernel must not touch (other KV-cache rows, elements past `rows`, logits outside the
//    classifier block, xn when row_base > 0, a GEMM's output outside its positions) is checked bit for bit
//    against a sentinel, and reads past the valid range are caught by NaN in the cache rows after `pos`.
#include <cstddef>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "llamacl/device.hpp"
#include "llamacl/kernel_args.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

// What one check found: every comparison's failures, and the comparison nearest its bound (largest
// error over bound; a bit-identical comparison has bound 0).
struct KernelCheckResult {
    explicit KernelCheckResult(std::string check) : name(std::move(check)) {}
    std::string name;
    std::vector<std::string> failures;  // one line each, naming the case and the tensor
    double max_abs_err = 0;             // of the comparison nearest its bound
    double tolerance = 0;               // that comparison's bound (absolute)
    bool passed() const { return failures.empty(); }
};

// One device and the kernels of one launch shape for matrices of one weight format, with buffers and
// launches as the runtime makes them.
class KernelHarness {
public:
    KernelHarness(Device& device, const LaunchShape& shape, const WeightFormat& weights = {},
                  bool warp_shuffles = true, TensorCores tensor_cores = TensorCores::where_present,
                  const std::string& build_options = "", float norm_eps = Config{}.norm_eps,
                  PromptPrecision precision = PromptPrecision::exact);

    Device& device;
    KernelSet kernels;
    const WeightFormat weights;
    const float norm_eps;       // the kernels' RMSNorm epsilon, and the reference's
    const bool exact;           // the exact shape on a device with correctly rounded divide and sqrt
    const bool exact_exp;       // exact, and exp() is glibc's expf (kernels/expf.cl)
    const bool exact_products;  // the matrix-vector products bit-identical (exact; quantized: the rule above)
    const bool exact_gemm;      // the gemm's too
    const double tolerance;     // relative to the tensor's largest magnitude, where not exact
    const bool emulated;        // tensor cores emulated: slow, so the GEMM checks take fewer sizes

    // The smallest length from n up that is a multiple of `multiple` and, for quantized weights, of the
    // group size: a case keeps its awkward counts of rows, heads and positions while its rows hold whole
    // groups.
    int row_length(int n, int multiple = 1) const;

    // A matrix of `rows` rows of n weights stored in the harness's format, on the device as the runtime
    // stages it and on the host for the reference.
    struct Matrix {
        WeightFormat format;
        int rows = 0, n = 0;
        std::vector<std::byte> stored;  // encode_weights' bytes
        cl::Buffer buffer;
        WeightTensor tensor() const;
        std::vector<float> widened() const;  // what the kernels read: the stored weights as floats
    };
    Matrix upload_matrix(const std::vector<float>& w, int rows, int n);
    // out(rows) = w . x as the reference computes it for the stored weights (run.c's matmul on the
    // widened weights; the rule's for quantized ones).
    static void matmul(float* out, const float* x, const Matrix& w);
    // A gemm's input of `positions` rows of n floats on the device: for quantized weights quantized there first
    // (quantize_rows), as the runtime quantizes every GEMM's input.
    cl::Buffer gemm_input(const std::vector<float>& in, int positions, int n);

    cl::Buffer upload(const std::vector<float>& data);
    cl::Buffer upload_bytes(const std::vector<std::byte>& data);
    // `bytes` zero bytes, for a kernel to write: written from the host, not only allocated, since Oclgrind's
    // uninitialized-value check keeps a released buffer's record of written bytes for a new buffer at its
    // address until the host writes the new one.
    cl::Buffer zeroed(std::size_t bytes);
    std::vector<float> download(const cl::Buffer& buffer, std::size_t n);
    std::vector<std::byte> download_bytes(const cl::Buffer& buffer, std::size_t n);
    // Binds `args` by name as the runtime does (kernel_args.hpp), runs the kernel over `range` and waits.
    // Every argument is bound, so that nothing of an earlier case carries over: a missing one throws
    // std::logic_error.
    void run(cl::Kernel& kernel, const KernelSignature& signature, const KernelSet::Range& range,
             std::initializer_list<KernelArg> args);
    // A matrix-vector kernel as the runtime launches it: the build and range KernelSet::matvec picks for
    // `rows` rows of n elements (widened rows included).
    void run(KernelSet::Matvec which, int rows, int n, std::initializer_list<KernelArg> args);
};

// Records comparisons into a KernelCheckResult; `context` names the case in every failure line.
class KernelComparer {
public:
    explicit KernelComparer(KernelCheckResult& result) : result_(result) {}
    std::string context;

    void bit_identical(std::span<const float> got, std::span<const float> want, const std::string& what);
    // max |got - want| <= rel x max |want| (NaN is the worst error).
    void close(std::span<const float> got, std::span<const float> want, double rel, const std::string& what);
    // Bit-identical where the arithmetic is identical (exact_here and the harness allows it), else within
    // the shape's tolerance.
    void match(const KernelHarness& h, bool exact_here, std::span<const float> got, std::span<const float> want,
               const std::string& what);
    // match() for a tensor computed through exp(): bit-identical only where the device's exp is glibc's.
    void match_exp(const KernelHarness& h, std::span<const float> got, std::span<const float> want,
                   const std::string& what);
    // For a matrix-vector product (after rope, where the kernel applies it): bit-identical where
    // h.exact_products.
    void match_product(const KernelHarness& h, std::span<const float> got, std::span<const float> want,
                       const std::string& what);
    // Every element still the sentinel the harness filled it with.
    void untouched(std::span<const float> got, const std::string& what);
    // Records a failure unless `ok`; returns `ok`.
    bool expect(bool ok, const std::string& what);

private:
    void fail(const std::string& line);
    void record(double err, double bound);
    KernelCheckResult& result_;
    double worst_ratio_ = -1;
};

inline constexpr float kKernelSentinel = -1234.5f;  // "never written"

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f);

// The checks, each over its own seeded cases.
KernelCheckResult check_attn_qkv_rope(KernelHarness& h);
KernelCheckResult check_attention(KernelHarness& h);
// A context longer than a chunk's scores may be (KernelSet::kScoreCapacity).
KernelCheckResult check_attention_long_context(KernelHarness& h);
KernelCheckResult check_matvec_residual(KernelHarness& h);
KernelCheckResult check_ffn_gate_up(KernelHarness& h);
KernelCheckResult check_classifier(KernelHarness& h);
KernelCheckResult check_greedy_argmax(KernelHarness& h);
// Prefill's (kernels/prefill.cl, prefill_quantized.cl): a batch of positions at once, row-major (positions, width).
KernelCheckResult check_rmsnorm_rows(KernelHarness& h);
// Quantized weights only: each position's row quantized by the format's rule, in the weights' device layout.
KernelCheckResult check_quantize_rows(KernelHarness& h);
KernelCheckResult check_gemm(KernelHarness& h);
KernelCheckResult check_gemm_qkv_rope(KernelHarness& h);
KernelCheckResult check_gemm_gate_up(KernelHarness& h);
KernelCheckResult check_rope_rows(KernelHarness& h);
KernelCheckResult check_attention_rows(KernelHarness& h);
KernelCheckResult check_swiglu(KernelHarness& h);

using KernelCheck = KernelCheckResult (*)(KernelHarness&);
// The checks of h's kernels: decode's in the forward pass's order, then prefill's (quantize_rows for
// quantized builds alone; none where prefill runs position by position): what `check`'s kernel rung runs and
// the tests enumerate.
std::vector<KernelCheck> kernel_checks(KernelHarness& h);
std::vector<KernelCheckResult> check_all_kernels(KernelHarness& h);

}  // namespace llamacl
