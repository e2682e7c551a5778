#pragma once
// --compare-cpu: the CPU reference runs in lockstep with the device on the same tokens, and every
// boundary the device exposes is compared with the reference's. The device drives generation (its
// logits are returned), so comparing changes what it costs, never what is printed.
#include <optional>
#include <string>
#include <vector>

#include "llamacl/device_forward.hpp"
#include "llamacl/reference.hpp"

namespace llamacl {

// How far one device tensor is from the reference's.
struct BoundaryStats {
    int layer = -1;  // -1 for final_norm and logits
    Op op = Op::logits;
    double max_abs = 0;      // max |device - reference|
    double mean_abs = 0;     // mean |device - reference|
    double max_rel = 0;      // max |device - reference| / max(|reference|, 1e-6), elementwise
    std::size_t worst = 0;   // index of the element with the largest absolute error
    double scale = 0;        // max |reference|: what the tolerance is relative to
    bool diverged = false;   // max_abs > tolerance * max(scale, 1)
};

struct Divergence {
    int pos = 0;  // the token's position in the sequence (0-based)
    BoundaryStats stats;
};

// The default --tolerance: a thousandth of the tensor's largest magnitude. Reassociated float sums on a
// GPU stay around 1e-6 of it even after dozens of layers; real porting bugs are far above.
inline constexpr double kDefaultTolerance = 1e-3;
// With quantized weights of int8 values, 5 %: a last-bit difference in an activation (a device's own
// expf, a sum in another order) can round a value that is then quantized to the next integer of its
// group, a step of 1/127 of the group's largest value, in every product that reads it; the boundaries
// after it carry that on. Only the exact shape, with glibc's expf (a device with doubles), computes
// runq.c's bits.
inline constexpr double kInt8Tolerance = 0.05;
// With quantized weights of fewer bits (Q4_0's 4), 10 %: the same, for coarser weights.
inline constexpr double kFewBitsTolerance = 0.1;
inline double default_tolerance(const WeightFormat& weights) {
    if (!weights.quantized()) return kDefaultTolerance;
    return weights.value_bits() < 8 ? kFewBitsTolerance : kInt8Tolerance;
}

class LockstepCompare : public Forward {
public:
    LockstepCompare(DeviceForward& device, const Checkpoint& checkpoint, double tolerance);

    std::span<float> forward(int token, int pos) override;
    // The device's prefill against the reference position by position: every position's logits (the
    // device computes them all here), then every layer's keys and values of the prompt's positions, counted
    // at its last position. A one-position prompt, and any prompt with a fault injected (the device then
    // runs position by position), has every boundary of every position compared, as forward() does.
    std::span<float> prefill(std::span<const int> tokens, int first, const LogitsObserver& each = {}) override;

    const std::optional<Divergence>& first_divergence() const { return first_; }
    int tokens() const { return tokens_; }
    double max_abs_error() const { return max_abs_; }
    double tolerance() const { return tolerance_; }
    const std::vector<BoundaryStats>& first_token_table() const { return first_token_; }
    const std::vector<BoundaryStats>& divergent_token_table() const { return divergent_token_; }

    // The last stderr line: "compare-cpu: first divergence at token T, layer L, OP: max abs err E at
    // index I (tolerance X)" or "compare-cpu: no divergence over N tokens (max abs err E)".
    std::string summary() const;

private:
    // Counts one boundary's comparison at position pos.
    void record(int pos, BoundaryStats stats);
    // Closes position pos: its table is the first token's or the first divergent one's.
    void end_position(int pos);

    DeviceForward& device_;
    ReferenceForward reference_;
    double tolerance_;
    std::vector<std::vector<float>> expected_;  // this token's reference boundaries, in order
    std::vector<BoundaryStats> current_, first_token_, divergent_token_;
    std::optional<Divergence> first_;
    int tokens_ = 0;
    double max_abs_ = 0;
};

// |device - reference| of one value: none where the two are the same value (an infinity and itself
// included), infinite where either is NaN (a NaN on both sides is garbage on both, never agreement).
double value_error(double device, double reference);

// Compares one tensor (exposed for tests).
BoundaryStats compare_tensor(std::span<const float> device, std::span<const float> reference, double tolerance);

// A table of boundary statistics for --verbose.
std::string format_boundary_table(const std::vector<BoundaryStats>& rows);

// Parses LLAMACL_INJECT_FAULT ("layer:L,op:OP"; final_norm and logits take no layer). Throws a usage
// error naming the variable when malformed or out of range for `config`.
Fault parse_fault(const std::string& text, const Config& config);
// LLAMACL_INJECT_FAULT parsed for this model; nullopt when unset or empty. Read by every command that
// loads a model, so a malformed value is an error even where no fault can be injected. `command`, when
// given, is one that has no rungs: a rung fault (check's) is refused there too, naming it.
std::optional<Fault> fault_from_environment(const Config& config, const char* command = nullptr);
// LLAMACL_INJECT_FAULT=rung:NAME, `llama-cl check`'s self-test (that rung fails): NAME; nullopt for any
// other value (fault_from_environment's) or none. Such a value injects no boundary fault.
std::optional<std::string> rung_fault_from_environment();

}  // namespace llamacl
