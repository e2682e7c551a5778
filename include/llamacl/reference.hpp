#pragma once
// The CPU reference forward pass: exactly run.c's operations in run.c's order, so that its logits match
// llama2.c bit for bit on x86-64. It is a backend of its own (--backend cpu) and the oracle the OpenCL
// runtime is tested and --compare-cpu'd against.
#include <span>
#include <vector>

#include "llamacl/checkpoint.hpp"
#include "llamacl/forward.hpp"

namespace llamacl {

// The building blocks, each as run.c writes it. Kernel tests compare the device against these.
void rmsnorm(float* out, const float* x, const float* weight, int size);
void matmul(float* out, const float* x, const float* w, int n, int d);  // out(d) = w(d,n) @ x(n)
void rope(float* q, float* k, int pos, int dim, int kv_dim, int head_size);
// rope()'s (cos, sin) for every position and frequency, (seq_len, head_size / 2, 2), computed with the
// same float expressions, so that a device rotating by this table rotates by exactly the same angles.
std::vector<float> rope_table(int seq_len, int head_size);
void swiglu(float* hb, const float* hb2, int hidden_dim);  // hb = silu(hb) * hb2

// The final RMSNorm of `hidden` into `normed` (dim), then the classifier into `logits` (vocab).
void classify(const Checkpoint& checkpoint, const float* hidden, float* normed, float* logits);

class ReferenceForward : public Forward {
public:
    explicit ReferenceForward(const Checkpoint& checkpoint);
    std::span<float> forward(int token, int pos) override;
    // As forward(), reporting every boundary to `observer` (which may be empty).
    std::span<float> forward(int token, int pos, const BoundaryObserver& observer);

private:
    const Checkpoint& ck_;
    Config c_;
    // run.c's RunState: activations rewritten every layer, and the KV cache that grows with pos.
    std::vector<float> x_, xb_, xb2_, hb_, hb2_, q_, att_, logits_;
    std::vector<float> key_cache_, value_cache_;  // (layer, seq_len, kv_dim)
};

}  // namespace llamacl
