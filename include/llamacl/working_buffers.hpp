#pragma once
// Activations of one forward pass on the device, allocated once per session and rewritten by every
// layer of every token: the output of one layer stays on the device as the input of the next.
#include <cstddef>
#include <cstdint>

#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"

namespace llamacl {

struct WorkingBuffers {
    // The bytes of each buffer below: the one place they are sized, for the allocation and for the
    // capacity plan. attention_chunks: the most chunks attention splits a head into
    // (KernelSet::attention_chunks); argmax_groups: KernelSet::argmax_groups; scores_in_memory: whether
    // attention writes its scores to `att` (kernels built without device fences: attention.cl's SCORE),
    // else it only passes it along; prefill_scores_in_memory: the same for prefill's attention (attention_rows,
    // where KernelSet::attention_tiles_possible is false); prefill_batch: the most positions a prefill batch
    // holds (prefill_batch in kernel_set.hpp).
    struct Sizes {
        Sizes(const Config& config, int attention_chunks, int argmax_groups, bool scores_in_memory,
              bool prefill_scores_in_memory, int prefill_batch);
        std::size_t x, xn, q, xb, hb, att, att_partial, att_arrivals, logits, tokens, argmax_partial;
        std::size_t batch_x, batch_xn, batch_q, batch_xb, batch_hb, batch_att, batch_hb_up, batch_xq;
        std::uint64_t total() const;
    };

    WorkingBuffers(const Device& device, const Config& config, int attention_chunks, int argmax_groups,
                   bool scores_in_memory, bool prefill_scores_in_memory, int prefill_batch);
    int prefill_batch;
    cl::Buffer x;       // residual stream (dim)
    cl::Buffer xn;      // last RMSNorm output, kept for inspection only: kernels fold the norm in (dim)
    cl::Buffer q;       // query after RoPE (dim)
    cl::Buffer xb;      // attention output (dim)
    cl::Buffer hb;      // SwiGLU output (hidden_dim)
    cl::Buffer att;     // attention scores (n_heads, seq_len), or one unused float (scores_in_memory)
    cl::Buffer att_partial;  // attention's per-chunk results (n_heads, attention_chunks, head_size + 2)
    cl::Buffer att_arrivals;  // chunks of each head done (uint, n_heads; zero between launches, see attention.cl)
    cl::Buffer logits;  // classifier output (vocab), then the token kernel's give-up mark (see token_kernel.hpp)
    // Greedy decoding on the device (kernels/greedy.cl):
    cl::Buffer tokens;          // the token at each position (int, seq_len + 1): the prompt's, then chosen
    // Each work-group's winner in the first argmax step, or each token kernel work-group's best logit
    // (int, argmax_groups).
    cl::Buffer argmax_partial;
    // Prefill (kernels/prefill.cl), each a row per position of the batch: the residual streams (dim), their
    // RMSNorm (dim), queries (dim), attention outputs (dim), the FFN's SwiGLU output (hidden_dim;
    // quantized weights: the gate first), and attention's scores (n_heads x seq_len; one unused float unless
    // prefill_scores_in_memory).
    cl::Buffer batch_x, batch_xn, batch_q, batch_xb, batch_hb, batch_att;
    // Quantized weights alone (prefill_quantized.cl: its products are not fused), else one unused float
    // each: the FFN's up projection (hidden_dim a position), and a GEMM's input, each position's row
    // quantized (rows of the longer of dim and hidden_dim, laid out as weight rows).
    cl::Buffer batch_hb_up, batch_xq;
};

}  // namespace llamacl
