#pragma once
// run.c's math, each function as run.c writes it: the CPU reference's forward pass is built from these,
// and the device runtime uses them where it computes on the host (the RoPE table it uploads, the
// classifier with --finalize=cpu). Kernel tests compare the device against them.
#include <cstdint>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <vector>

#include "llamacl/model_config.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

// out = weight * x / sqrt(mean(x^2) + eps), run.c's steps (run.c's eps: 1e-5, Config::norm_eps).
void rmsnorm(float* out, const float* x, const float* weight, int size, float eps);

// Matrix-vector products over fp32 weights.
void matmul(float* out, const float* x, const float* w, int n, int d);  // out(d) = w(d,n) @ x(n)

// runq.c's Q8_0: symmetric int8 per group of `group_size` (dividing n), scale = max|x| / 127 and
// q = round(x / scale), halves away from zero (a group of zeros, where x / scale is 0 / 0, gives 0 as
// runq.c's build does).
void quantize(std::int8_t* q, float* scales, const float* x, int n, int group_size);
// ggml's quantize_row_q8_0_ref in groups of `group_size` (ggml's blocks: 32): d = max|x| / 127,
// q = roundf(x * id) with id = 1 / d (0 where d is 0), and the scale kept is d rounded to a half, widened.
// (A NaN is never the maximum, as in quantize(); ggml's MAX would take one.)
void quantize_ggml(std::int8_t* q, float* scales, const float* x, int n, int group_size);
// x quantized as a matmul's input for weights of `format` (q8_0), by its rule: quantize() or quantize_ggml().
void quantize_input(std::int8_t* q, float* scales, const float* x, int n, const WeightFormat& format);
// x(n) = q * scale for Q8_0, the widened halves for f16, a copy for f32.
void dequantize(float* out, const WeightTensor& w, std::uint64_t n);
float half_to_float(std::uint16_t half);  // exact: every half is a float
std::uint16_t float_to_half(float f);  // IEEE half, rounded to nearest even (torch's .half(), ggml's)

// A matmul's input x(n) in the form its weights' format multiplies: fp32 as it is, or for q8_0 quantized
// in the weights' groups. runq.c quantizes a vector once for all the matmuls that read it (xb once for
// wq, wk and wv), and so does the caller: set() once, then matmul() as often as needed.
class MatmulInput {
public:
    MatmulInput(const WeightFormat& format, int n);
    void set(const float* x);
    const WeightFormat& format() const { return format_; }
    int size() const { return n_; }
    const float* x() const { return x_; }
    const std::int8_t* q() const { return q_.data(); }  // q8_0
    const float* scales() const { return scales_.data(); }

private:
    WeightFormat format_;
    int n_;
    const float* x_ = nullptr;
    std::vector<std::int8_t> q_;
    std::vector<float> scales_;
};

// out(d) = w(d,n) @ x(n) for weights of x's type. fp32 and f16 as run.c's loop over the (widened)
// weights; q8_0 an exact int32 dot product per group, then group after group runq.c's
// val += ival * w_scale * x_scale, or with QuantRule::ggml ggml's vec_dot_q8_0_q8_0,
// val += ival * (w_scale * x_scale).
void matmul(float* out, const MatmulInput& x, const WeightTensor& w, int d);
// Several matmuls of the same input (wq, wk and wv; w1 and w3), their rows shared among the threads as
// one matmul's, so that the threads meet once for all of them. Each output's bits are matmul()'s.
struct MatmulOutput {
    float* out;
    const WeightTensor& w;
    int d;
    std::size_t stride = 0;  // with a batch of inputs: floats from one input's outputs to the next's
};
void matmuls(const MatmulInput& x, std::initializer_list<MatmulOutput> outputs);
// The same for a batch of inputs (a prompt's positions), each output's rows for input i from out + i *
// stride, the weights read from memory once for the batch: a thread takes its share of the rows in
// chunks that stay in its core's caches, each chunk multiplied by every input in turn, eight inputs at a
// time (float rows: each block of weights transposed once for the eight; Q8_0 rows: widened once).
void matmuls(std::span<const MatmulInput> inputs, std::initializer_list<MatmulOutput> outputs);

// RoPE's angles: element pair (i, i + 1) of a head (i even) turns at pos by run.c's
// pos * (1 / powf(base, i / head_size)), then divided by factors[i / 2] where the model has factors
// (Llama 3's rope_freqs, as ggml_rope_ext's freq_factors). run.c's: base 10000, no factors.
struct Rope {
    int head_size = 0;
    float base = 10000.0f;
    std::span<const float> factors = {};  // empty, or head_size / 2 (Config::rope_factors)
    static Rope of(const Config& c) { return {c.head_size(), c.rope_base, c.rope_factors}; }
    float angle(int pos, int i) const;
};
// Rotates q (dim) and k (kv_dim) at pos, head by head.
void rope(float* q, float* k, int pos, int dim, int kv_dim, const Rope& r);
// rope()'s (cos, sin) for every position and pair, (seq_len, head_size / 2, 2), computed with the same
// float expressions, so that a device rotating by this table rotates by exactly the same angles.
std::vector<float> rope_table(int seq_len, const Rope& r);
// Its rows for positions first .. first + count - 1, at out.
void rope_rows(float* out, int first, int count, const Rope& r);

void swiglu(float* hb, const float* hb2, int hidden_dim);  // hb = silu(hb) * hb2

// The final RMSNorm of `hidden` by `rms_final` into `normed` (dim), then `classifier` (the checkpoint's,
// or the reference's laid-out copy of it) into `logits` (vocab), in the model's weight format.
void classify(const Config& c, const float* rms_final, const WeightTensor& classifier, const float* hidden,
              float* normed, float* logits);

// An f32 matrix w(d, n) laid out for matmul's row blocks (a vector lane per row, kRowBlockRows rows, each
// summed in run.c's order): rows 8b .. 8b + 7 and columns 8s .. 8s + 7 as those columns one after another,
// eight rows each, which the blocks otherwise load row by row and transpose at every step; a block's steps
// then read one contiguous run. Rows [first, last) of `out` (d * n floats, as the matrix; first a multiple
// of kRowBlockRows), whole blocks of whole steps: the rows past the last block and the columns past the
// last step stay unwritten, and matmul reads them from w. WeightTensor::row_blocks points at the result.
inline constexpr int kRowBlockRows = 8;
void lay_out_row_blocks(float* out, const float* w, int n, int first, int last);

}  // namespace llamacl
