#pragma once
// The commands a token's schedule puts on the queue, by what they do: the keys of `bench --profile`'s rows
// and of the launch log (device_forward.hpp's LaunchRecord).
#include <cstddef>

namespace llamacl {

enum class Command {
    write_embedding,     // the token's embedding row into x
    attn_qkv_rope,       // q, k, v of a layer, RoPE applied
    attention,           // a layer's attention over the cache
    matvec_residual_wo,  // x += wo . attention's output
    ffn_gate_up,         // hb = silu(w1 . xn) * (w3 . xn)
    matvec_residual_w2,  // x += w2 . hb
    rmsnorm_final,       // the final RMSNorm on its own (CPU shapes)
    classifier,          // the logits (one per block of the classifier)
    forward_token,       // the token kernel: the whole forward pass
    argmax,              // greedy decoding's first step
    argmax_embed,        // greedy decoding's second step: the next token and its embedding
    read_logits,         // the logits (and the token kernel's give-up mark) to the host
    read_hidden,         // --finalize=cpu: the final hidden state to the host
    read_tokens,         // greedy decoding: a batch's tokens to the host
    // Prefill (a batch of positions at once):
    write_embeddings,    // the batch's embedding rows into its residual streams
    rmsnorm_rows,        // RMSNorm of every position's residual stream
    quantize_rows,       // quantized weights: a GEMM's input, every position's row quantized
    gemm_qkv_rope,       // the batch's queries, keys and values, RoPE applied, k and v into the cache
    gemm_q,              // quantized weights: the batch's projections, by the weight they read
    gemm_k,
    gemm_v,
    rope_rows,           // quantized weights: RoPE of the batch's queries and keys
    attention_rows,      // causal attention of the batch over the cache, a work-item per (head, position)
    attention_tiles,     // the same, a work-group per (block of positions, head) (GPU shapes)
    gemm_wo,             // with the residual add
    gemm_gate_up,        // silu(w1 . xn) * (w3 . xn)
    gemm_w1,             // quantized weights: its two products, then SwiGLU
    gemm_w3,
    swiglu,
    gemm_w2,             // with the residual add
    copy_last_row,       // the batch's last residual stream into x, for the classifier
};
inline constexpr std::size_t kCommandCount = static_cast<std::size_t>(Command::copy_last_row) + 1;

// The command's label in the profile: the kernel's name, with the weight it reads where one kernel serves two.
const char* command_name(Command command);

}  // namespace llamacl
