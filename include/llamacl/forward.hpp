#pragma once
// What a backend must provide for generation, and the named points inside a forward pass where two
// backends can be compared (--compare-cpu).
#include <cstddef>
#include <functional>
#include <span>
#include <string_view>

#include "llamacl/error.hpp"

namespace llamacl {

// The boundaries of one forward pass, in the order they are produced. Per-layer ops come first;
// final_norm and logits belong to no layer.
enum class Op {
    attn_norm,      // RMSNorm of the residual stream before attention (dim)
    q,              // query after RoPE (dim)
    k,              // key after RoPE, as written to the KV cache (kv_dim)
    v,              // value, as written to the KV cache (kv_dim)
    attention,      // attention output before the output projection (dim)
    attn_residual,  // residual stream after x += wo * attention (dim)
    ffn_norm,       // RMSNorm of the residual stream before the FFN (dim)
    ffn_hidden,     // SwiGLU output silu(w1 x) * (w3 x) (hidden_dim)
    ffn_residual,   // residual stream after x += w2 * ffn_hidden (dim)
    final_norm,     // final RMSNorm of the residual stream (dim)
    logits,         // classifier output (vocab)
};
inline constexpr int kOpCount = static_cast<int>(Op::logits) + 1;
inline constexpr bool is_layer_op(Op op) { return op < Op::final_norm; }
const char* op_name(Op op);
// Parses an op name as op_name() prints it; returns false when unknown.
bool parse_op(std::string_view name, Op& op);

// Called with each boundary's values as a forward pass produces them; layer is -1 for final ops.
using BoundaryObserver = std::function<void(int layer, Op op, std::span<const float> values)>;

// Greedy decoding (run.c's sampler at temperature 0) by a backend that takes each position's argmax
// itself, and so can run positions ahead of the caller's reading them: positions [first, end), the
// tokens at first, first + 1, ... given (`forced`, at least one: the prompt), each later one the argmax of
// the previous position's logits.
// The logits of a position hold NaN or an infinity: the model computes garbage from there on (a
// non-finite weight, or a fault of the device), so the run ends there.
class NonFiniteLogits : public Error {
public:
    NonFiniteLogits(int pos, std::size_t index, float value);
    explicit NonFiniteLogits(int pos);  // where the logits themselves are not at hand (greedy decoding)
    int pos() const { return pos_; }

private:
    int pos_;
};

class GreedyDecoder {
public:
    virtual ~GreedyDecoder() = default;
    virtual void start(int first, std::span<const int> forced, int end) = 0;
    // The token at pos + 1 (forced, or the argmax of position pos's logits), for pos = first, first + 1,
    // ... in turn, each < end. Throws NonFiniteLogits where position pos's logits hold NaN or an infinity.
    virtual int next(int pos) = 0;
};

// Sees the logits of position `pos` (the caller may modify them, as the sampler does).
using LogitsObserver = std::function<void(int pos, std::span<float> logits)>;

class Forward {
public:
    virtual ~Forward() = default;
    // Runs the model on `token` at position `pos` (0-based, < seq_len) and returns the logits. The span
    // stays valid until the next call; the caller may modify it (the sampler does, as run.c's does).
    virtual std::span<float> forward(int token, int pos) = 0;
    // Runs `tokens` (at least one) at positions first, first + 1, ... and returns the last position's
    // logits, valid until the next call; `each`, when given, sees every position's logits in order. The
    // default runs forward() position by position (the CPU reference: run.c's order); a device runs the
    // positions in batches (a prefill).
    virtual std::span<float> prefill(std::span<const int> tokens, int first, const LogitsObserver& each = {});
    // The backend's own greedy decoding, or nullptr: then greedy decoding is forward() and an argmax.
    virtual GreedyDecoder* greedy_decoder() { return nullptr; }
};

}  // namespace llamacl
