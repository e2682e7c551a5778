#pragma once
// run.c's math, each function as run.c writes it: the CPU reference's forward pass is built from these,
// and the device runtime uses them where it computes on the host (the RoPE table it uploads, the
// classifier with --finalize=cpu). Kernel tests compare the device against them.
#include <vector>

#include "llamacl/checkpoint.hpp"

namespace llamacl {

void rmsnorm(float* out, const float* x, const float* weight, int size);

// Matrix-vector products over fp32 weights.
void matmul(float* out, const float* x, const float* w, int n, int d);  // out(d) = w(d,n) @ x(n)

void rope(float* q, float* k, int pos, int dim, int kv_dim, int head_size);
// rope()'s (cos, sin) for every position and frequency, (seq_len, head_size / 2, 2), computed with the
// same float expressions, so that a device rotating by this table rotates by exactly the same angles.
std::vector<float> rope_table(int seq_len, int head_size);

void swiglu(float* hb, const float* hb2, int hidden_dim);  // hb = silu(hb) * hb2

// The final RMSNorm of `hidden` into `normed` (dim), then the classifier into `logits` (vocab).
void classify(const Checkpoint& checkpoint, const float* hidden, float* normed, float* logits);

}  // namespace llamacl
