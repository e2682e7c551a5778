#pragma once
// Activations of one forward pass on the device, allocated once per session and rewritten by every
// layer of every token: the output of one layer stays on the device as the input of the next.
#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"

namespace llamacl {

struct WorkingBuffers {
    WorkingBuffers(const Device& device, const Config& config);
    cl::Buffer x;       // residual stream (dim)
    cl::Buffer xn;      // last RMSNorm output, kept for inspection only: kernels fold the norm in (dim)
    cl::Buffer q;       // query after RoPE (dim)
    cl::Buffer xb;      // attention output (dim)
    cl::Buffer hb;      // SwiGLU output (hidden_dim)
    cl::Buffer att;     // attention scores (n_heads, seq_len)
    cl::Buffer logits;  // classifier output (vocab)
};

}  // namespace llamacl
