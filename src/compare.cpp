#include "llamacl/compare.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "llamacl/error.hpp"
#include "llamacl/number_text.hpp"

namespace llamacl {

namespace {

std::string where(const BoundaryStats& s) {
    return s.layer >= 0 ? "layer " + std::to_string(s.layer) + ", " + op_name(s.op) : std::string(op_name(s.op));
}

}  // namespace

double value_error(double device, double reference) {
    if (std::isnan(device) || std::isnan(reference)) return INFINITY;
    return device == reference ? 0 : std::fabs(device - reference);
}

BoundaryStats compare_tensor(std::span<const float> device, std::span<const float> reference, double tolerance) {
    BoundaryStats s;
    double sum = 0;
    for (std::size_t i = 0; i < reference.size(); ++i) {
        const double ref = reference[i];
        const double err = value_error(device[i], ref);
        sum += err;
        if (std::isfinite(ref)) s.scale = std::max(s.scale, std::fabs(ref));  // (an infinite scale passes anything)
        s.max_rel = std::max(s.max_rel, err / std::max(std::fabs(ref), 1e-6));
        if (err > s.max_abs) {
            s.max_abs = err;
            s.worst = i;
        }
    }
    s.mean_abs = reference.empty() ? 0 : sum / static_cast<double>(reference.size());
    s.diverged = !(s.max_abs <= tolerance * std::max(s.scale, 1.0));
    return s;
}

LockstepCompare::LockstepCompare(DeviceForward& device, const Checkpoint& checkpoint, double tolerance)
    : device_(device), reference_(checkpoint, device.plan().positions), tolerance_(tolerance) {}

std::span<float> LockstepCompare::forward(int token, int pos) {
    expected_.clear();
    reference_.forward(token, pos, [this](int, Op, std::span<const float> v) { expected_.emplace_back(v.begin(), v.end()); });
    current_.clear();
    std::size_t next = 0;
    const std::span<float> logits = device_.forward(token, pos, [&](int layer, Op op, std::span<const float> v) {
        BoundaryStats s = compare_tensor(v, expected_.at(next++), tolerance_);
        s.layer = layer;
        s.op = op;
        record(pos, s);
    });
    end_position(pos);
    return logits;
}

std::span<float> LockstepCompare::prefill(std::span<const int> tokens, int first, const LogitsObserver& each) {
    if (device_.fault_injected() || tokens.size() == 1) return Forward::prefill(tokens, first, each);
    expected_.clear();
    reference_.prefill(tokens, first, [&](int, std::span<float> l) { expected_.emplace_back(l.begin(), l.end()); });
    const int n = static_cast<int>(tokens.size()), last = first + n - 1;
    return device_.prefill(tokens, first, [&](int pos, std::span<float> l) {
        current_.clear();
        BoundaryStats s = compare_tensor(l, expected_.at(static_cast<std::size_t>(pos - first)), tolerance_);
        s.op = Op::logits;
        record(pos, s);
        if (pos == last) {
            for (int layer = 0; layer < device_.plan().n_layers; ++layer) {
                for (const Op op : {Op::k, Op::v}) {
                    BoundaryStats c = compare_tensor(device_.cache_rows(layer, op, first, n),
                                                     reference_.cache_rows(layer, op, first, n), tolerance_);
                    c.layer = layer;
                    c.op = op;
                    record(pos, c);
                }
            }
        }
        end_position(pos);
        if (each) each(pos, l);
    });
}

void LockstepCompare::record(int pos, BoundaryStats stats) {
    max_abs_ = std::max(max_abs_, stats.max_abs);
    if (stats.diverged && !first_) first_ = Divergence{pos, stats};
    current_.push_back(stats);
}

void LockstepCompare::end_position(int pos) {
    if (tokens_ == 0) first_token_ = current_;
    if (first_ && first_->pos == pos) divergent_token_ = current_;
    ++tokens_;
}

std::string LockstepCompare::summary() const {
    if (first_) {
        const BoundaryStats& s = first_->stats;
        return "compare-cpu: first divergence at token " + std::to_string(first_->pos) + ", " + where(s) +
               ": max abs err " + number_text("%.6g", s.max_abs) + " at index " + std::to_string(s.worst) +
               " (tolerance " + number_text("%g", tolerance_) + ")";
    }
    return "compare-cpu: no divergence over " + std::to_string(tokens_) + " tokens (max abs err " +
           number_text("%.6g", max_abs_) + ")";
}

std::string format_boundary_table(const std::vector<BoundaryStats>& rows) {
    std::string out = "  layer  op             max abs err   mean abs err  max rel err   worst index  scale\n";
    for (const BoundaryStats& s : rows) {
        char line[160];
        std::snprintf(line, sizeof line, "  %5s  %-13s  %-12.4g  %-12.4g  %-12.4g  %-11zu  %.4g%s\n",
                      s.layer >= 0 ? std::to_string(s.layer).c_str() : "-", op_name(s.op), s.max_abs, s.mean_abs,
                      s.max_rel, s.worst, s.scale, s.diverged ? "  <- diverged" : "");
        out += line;
    }
    return out;
}

Fault parse_fault(const std::string& text, const Config& config) {
    const auto bad = [&](const std::string& why) {
        return usage_error("LLAMACL_INJECT_FAULT=" + text + ": " + why +
                           " (expected layer:L,op:OP with OP one of attn_norm, q, k, v, attention, attn_residual, "
                           "ffn_norm, ffn_hidden, ffn_residual; or op:final_norm / op:logits; or rung:NAME for llama-cl check)");
    };
    Fault fault;
    bool has_op = false, has_layer = false;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, comma - start);
        const std::size_t colon = item.find(':');
        if (colon == std::string::npos) throw bad("'" + item + "' is not key:value");
        const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
        if ((key == "layer" && has_layer) || (key == "op" && has_op)) throw bad(key + " given twice");
        if (key == "layer") {
            std::size_t used = 0;
            try {
                fault.layer = std::stoi(value, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == 0 || used != value.size()) throw bad("layer '" + value + "' is not a number");
            has_layer = true;
        } else if (key == "op") {
            if (!parse_op(value, fault.op)) throw bad("unknown op '" + value + "'");
            has_op = true;
        } else {
            throw bad("unknown key '" + key + "'");
        }
        start = comma + 1;
    }
    if (!has_op) throw bad("no op given");
    if (is_layer_op(fault.op)) {
        if (!has_layer) throw bad("op " + std::string(op_name(fault.op)) + " needs a layer");
        if (fault.layer < 0 || fault.layer >= config.n_layers)
            throw bad("layer " + std::to_string(fault.layer) + " is outside 0.." + std::to_string(config.n_layers - 1));
    } else {
        if (has_layer) throw bad(std::string(op_name(fault.op)) + " belongs to no layer");
        fault.layer = -1;
    }
    return fault;
}

namespace {
constexpr std::string_view kRungPrefix = "rung:";
}

std::optional<Fault> fault_from_environment(const Config& config, const char* command) {
    const char* text = std::getenv("LLAMACL_INJECT_FAULT");
    if (!text || !*text) return std::nullopt;
    if (std::string_view(text).starts_with(kRungPrefix)) {
        if (command)
            throw usage_error(std::string("LLAMACL_INJECT_FAULT=") + text + ": a rung fault is llama-cl check's, not " +
                              command + "'s; unset it, or give layer:L,op:OP");
        return std::nullopt;
    }
    return parse_fault(text, config);
}

std::optional<std::string> rung_fault_from_environment() {
    const char* text = std::getenv("LLAMACL_INJECT_FAULT");
    if (!text || !std::string_view(text).starts_with(kRungPrefix)) return std::nullopt;
    return std::string(text + kRungPrefix.size());
}

}  // namespace llamacl
