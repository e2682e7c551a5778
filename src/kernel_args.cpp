#include "llamacl/kernel_args.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace llamacl {

namespace {

using Names = std::string_view;

constexpr Names kAttnQkvRope[] = {"x",         "rms_weight", "wq",     "wk",       "wv",  "rope",
                                  "q",         "key_cache",  "value_cache", "xn",  "dim", "kv_dim",
                                  "head_size", "pos",        "staged", "staged_n"};
constexpr Names kFfnGateUp[] = {"x", "rms_weight", "w1", "w3", "hb", "xn", "dim", "hidden_dim", "staged", "staged_n"};
constexpr Names kRmsnorm[] = {"x", "weight", "out", "n"};
constexpr Names kClassifier[] = {"x",    "rms_weight", "w",        "logits", "xn",
                                 "dim",  "rows",       "row_base", "staged", "staged_n"};
constexpr Names kMatvecResidual[] = {"w", "in", "x", "n", "rows", "staged", "staged_n"};
constexpr Names kAttention[] = {"q",         "key_cache", "value_cache", "att",    "out", "partial_out", "arrivals",
                                "n_heads",   "head_size", "kv_dim",      "kv_mul", "seq_len", "pos", "chunk_len"};
constexpr Names kArgmax[] = {"logits", "count", "partial"};
constexpr Names kArgmaxEmbed[] = {"logits", "partial", "groups", "choose", "tokens", "pos", "table", "x", "dim"};
constexpr Names kRmsnormRows[] = {"x", "weight", "out", "n"};
constexpr Names kGemm[] = {"w", "in", "out", "out_offset", "n", "rows", "positions", "accumulate"};
constexpr Names kGemmQkvRope[] = {"wq",        "wk",          "wv",  "in",     "rope",      "q",  "key_cache",
                                  "value_cache", "dim", "kv_dim", "head_size", "pos", "positions"};
constexpr Names kGemmGateUp[] = {"w1", "w3", "in", "hb", "dim", "hidden_dim", "positions"};
constexpr Names kAttentionRows[] = {"q",      "key_cache", "value_cache", "att", "out", "n_heads", "head_size",
                                    "kv_dim", "kv_mul",    "seq_len",     "pos", "positions"};
constexpr Names kAttentionTiles[] = {"q",   "key_cache", "value_cache", "out",  "n_heads", "head_size", "kv_dim",
                                     "kv_mul", "pos",     "positions",   "queries", "keys", "scores",   "exchange"};
constexpr Names kQuantizeRows[] = {"x", "out", "n", "staged"};
constexpr Names kRopeRows[] = {"q", "key_cache", "rope", "dim", "kv_dim", "head_size", "pos", "positions"};
constexpr Names kSwiglu[] = {"gate", "up", "count"};
constexpr Names kForwardToken[] = {
    "x",           "rms_att",      "wq",        "wk",         "wv",             "wo",          "rms_ffn",
    "w1",          "w2",           "w3",        "rope",       "key_cache",      "value_cache", "q",
    "xb",          "hb",           "att",       "xn",         "xq",             "att_partial", "att_arrivals",
    "rms_final",   "wcls",         "logits",    "tokens",     "argmax_partial", "chunk_lens",  "first",
    "count",       "greedy",       "chosen_from", "sync",     "sync_base",      "spin_limit",  "staged",
    "seq_len",     "stride_cache"};
constexpr Names kCopy[] = {"src", "dst"};
constexpr Names kFma[] = {"out", "b", "c", "steps"};
constexpr Names kMma[] = {"out", "a", "b", "steps"};

}  // namespace

namespace signatures {
const KernelSignature attn_qkv_rope{"attn_qkv_rope", kAttnQkvRope};
const KernelSignature ffn_gate_up{"ffn_gate_up", kFfnGateUp};
const KernelSignature rmsnorm{"rmsnorm", kRmsnorm};
const KernelSignature classifier{"classifier", kClassifier};
const KernelSignature matvec_residual{"matvec_residual", kMatvecResidual};
const KernelSignature attention{"attention", kAttention};
const KernelSignature argmax{"argmax", kArgmax};
const KernelSignature argmax_embed{"argmax_embed", kArgmaxEmbed};
const KernelSignature rmsnorm_rows{"rmsnorm_rows", kRmsnormRows};
const KernelSignature gemm{"gemm", kGemm};
const KernelSignature gemm_qkv_rope{"gemm_qkv_rope", kGemmQkvRope};
const KernelSignature gemm_gate_up{"gemm_gate_up", kGemmGateUp};
const KernelSignature attention_rows{"attention_rows", kAttentionRows};
const KernelSignature attention_tiles{"attention_tiles", kAttentionTiles};
const KernelSignature quantize_rows{"quantize_rows", kQuantizeRows};
const KernelSignature rope_rows{"rope_rows", kRopeRows};
const KernelSignature swiglu{"swiglu", kSwiglu};
const KernelSignature forward_token{"forward_token", kForwardToken};
const KernelSignature copy_f32{"copy_f32", kCopy};
const KernelSignature fma_f32{"fma_f32", kFma};
const KernelSignature mma_tf32{"mma_tf32", kMma};
const KernelSignature mma_s8{"mma_s8", kMma};
}  // namespace signatures

std::span<const KernelSignature* const> kernel_signatures() {
    static const std::array<const KernelSignature*, 22> all = {
        &signatures::attn_qkv_rope, &signatures::ffn_gate_up,     &signatures::rmsnorm,
        &signatures::classifier,    &signatures::matvec_residual, &signatures::attention,
        &signatures::argmax,        &signatures::argmax_embed,    &signatures::rmsnorm_rows,
        &signatures::gemm,          &signatures::gemm_qkv_rope,   &signatures::gemm_gate_up,
        &signatures::attention_rows, &signatures::attention_tiles, &signatures::quantize_rows,
        &signatures::rope_rows,     &signatures::swiglu,          &signatures::forward_token,
        &signatures::copy_f32,      &signatures::fma_f32,         &signatures::mma_tf32,
        &signatures::mma_s8};
    return all;
}

void bind_args(cl::Kernel& kernel, const KernelSignature& signature, std::span<const KernelArg> args) {
    for (const KernelArg& arg : args) {
        const auto at = std::find(signature.args.begin(), signature.args.end(), arg.name);
        if (at == signature.args.end())
            throw std::logic_error(std::string(signature.kernel) + " has no argument '" + std::string(arg.name) + "'");
        const auto index = static_cast<cl_uint>(at - signature.args.begin());
        std::visit(
            [&](const auto& value) {
                if constexpr (std::is_pointer_v<std::decay_t<decltype(value)>>)
                    kernel.setArg(index, *value);
                else
                    kernel.setArg(index, value);
            },
            arg.value);
    }
}

}  // namespace llamacl
