#include "llamacl/forward.hpp"

#include <cmath>
#include <string>

namespace llamacl {

namespace {

std::string non_finite_text(int pos, const std::string& what) {
    return "position " + std::to_string(pos) + ": the logits hold " + what +
           ", so the model computes garbage from here on; run llama-cl check on the model to find the cause";
}

}  // namespace

NonFiniteLogits::NonFiniteLogits(int pos, std::size_t index, float value)
    : Error(non_finite_text(pos, std::string(std::isnan(value) ? "NaN" : value > 0 ? "infinity" : "-infinity") +
                                     " (the logit of token " + std::to_string(index) + ")")),
      pos_(pos) {}

NonFiniteLogits::NonFiniteLogits(int pos) : Error(non_finite_text(pos, "NaN or an infinity")), pos_(pos) {}

const char* op_name(Op op) {
    switch (op) {
        case Op::attn_norm: return "attn_norm";
        case Op::q: return "q";
        case Op::k: return "k";
        case Op::v: return "v";
        case Op::attention: return "attention";
        case Op::attn_residual: return "attn_residual";
        case Op::ffn_norm: return "ffn_norm";
        case Op::ffn_hidden: return "ffn_hidden";
        case Op::ffn_residual: return "ffn_residual";
        case Op::final_norm: return "final_norm";
        case Op::logits: return "logits";
    }
    return "?";
}

std::span<float> Forward::prefill(std::span<const int> tokens, int first, const LogitsObserver& each) {
    std::span<float> logits;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const int pos = first + static_cast<int>(i);
        logits = forward(tokens[i], pos);
        if (each) each(pos, logits);
    }
    return logits;
}

bool parse_op(std::string_view name, Op& op) {
    for (int i = 0; i < kOpCount; ++i) {
        if (name == op_name(static_cast<Op>(i))) {
            op = static_cast<Op>(i);
            return true;
        }
    }
    return false;
}

}  // namespace llamacl
