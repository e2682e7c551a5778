#include "llamacl/commands.hpp"

#include <array>

namespace llamacl {

const char* command_name(Command command) {
    // In Command's order.
    static constexpr std::array<const char*, kCommandCount> names = {
        "write_embedding", "attn_qkv_rope", "attention",      "matvec_residual(wo)", "ffn_gate_up",
        "matvec_residual(w2)", "rmsnorm(final)", "classifier", "forward_token",       "argmax",
        "argmax_embed",    "read_logits",   "read_hidden",    "read_tokens",
        "write_embeddings", "rmsnorm_rows", "quantize_rows", "gemm_qkv_rope", "gemm(wq)", "gemm(wk)", "gemm(wv)",
        "rope_rows", "attention_rows", "attention_tiles", "gemm(wo)", "gemm_gate_up", "gemm(w1)", "gemm(w3)", "swiglu",
        "gemm(w2)", "copy_last_row"};
    return names[static_cast<std::size_t>(command)];
}

}  // namespace llamacl
