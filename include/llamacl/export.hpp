#pragma once
// Writing checkpoints as llama2.c's export.py does, from an fp32 checkpoint: version-2 (Q8_0) files for
// `llama-cl quantize`, and the same tensors in memory in any weight format for --weights.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "llamacl/checkpoint.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

// The largest power of two up to 64 (export.py's default) that divides both dim and hidden_dim.
int default_group_size(const Config& config);
// Throws usage_error naming --group-size unless `group_size` is positive and divides dim and hidden_dim.
void check_group_size_flag(const Config& config, int group_size, const std::string& path);

// export.py's quantize_q80 on `n` weights, in float32: per group, scale = max|w| / 127 and
// q = round(w / scale) with halves to even (torch.round); a group of zeros (0 / 0) gives zeros.
void quantize_q80(std::int8_t* q, float* scales, const float* w, std::uint64_t n, int group_size);
std::uint16_t float_to_half(float f);  // IEEE half, rounded to nearest even (torch's .half())

// Writes the fp32 checkpoint `fp32` as a version-2 file at `path`, the bytes export.py's version2_export
// writes for the same weights. The file appears complete or not at all (written aside, then renamed).
// `progress(done, total)` is called after each tensor, in bytes of fp32 weights read.
void write_version2(const Checkpoint& fp32, const std::string& path, int group_size,
                    const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

// `ck` with its weights of element type `type` (--weights): itself when they already are (or none is asked for),
// else converted from fp32 in memory (q8_0 in default_group_size groups). Throws usage_error when a
// conversion would start from anything but fp32.
Checkpoint with_weights(Checkpoint ck, std::optional<ElementType> type);

}  // namespace llamacl
