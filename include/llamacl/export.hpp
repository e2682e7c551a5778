#pragma once
// Writing checkpoints as llama2.c's export.py does, from an fp32 checkpoint: version-2 (Q8_0) files for
// `llama-cl quantize`, and the same tensors in memory in any weight format for --weights. And the
// encodings of ggml's tensor types that `quantize` writes to GGUF files.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "llamacl/checkpoint.hpp"
#include "llamacl/ggml_types.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

// The largest power of two up to 64 (export.py's default) that divides both dim and hidden_dim.
int default_group_size(const Config& config);
// The format --weights `type` converts `config`'s matrices to: q8_0 in default_group_size groups under
// runq.c's rule, in ggml's blocks of 32 under its rule; q4_0 in ggml's blocks; f32 and f16 under the
// config's rule. nullopt where ggml's blocks do not fit the rows (dim and hidden_dim).
std::optional<WeightFormat> converted_format(const Config& config, ElementType type);
// Throws usage_error naming --group-size unless `group_size` is positive and divides dim and hidden_dim.
void check_group_size_flag(const Config& config, int group_size, const std::string& path);

// export.py's quantize_q80 on `n` weights, in float32: per group, scale = max|w| / 127 and
// q = round(w / scale) with halves to even (torch.round); a group of zeros (0 / 0) gives zeros.
void quantize_q80(std::int8_t* q, float* scales, const float* w, std::uint64_t n, int group_size);
// `n` fp32 weights stored as `format` at `out` (format.bytes(n) bytes; for q8_0 the values, then the scales).
void encode_weights(std::byte* out, const float* w, std::uint64_t n, const WeightFormat& format);
// `n` fp32 weights as a GGUF tensor of `type` at `out` (ggml_bytes(n) bytes): F32 as they are, F16 as
// halves, Q8_0 and Q4_0 in blocks of 32 (n a multiple of 32) exactly as ggml's reference quantizers
// write them, with id = 1 / d (0 where d is 0). Q8_0 (quantize_row_q8_0_ref): d = max|w| / 127 stored as
// a half, then the 32 int8 roundf(w * id). Q4_0 (quantize_row_q4_0_ref): `max` is the first weight of the
// largest magnitude, with its sign; d = max / -8 stored as a half; q = min(15, (int8)(w * id + 8.5)),
// byte j holding q[j] in its low nibble and q[j + 16] in its high one. Halves round to nearest even.
// Throws Error for another type.
void encode_ggml(std::byte* out, const float* w, std::uint64_t n, GgmlType type);

// The largest magnitude of `n` weights. Throws Error("`tensor` holds NaN ...") at the first NaN or
// infinity: a model with one computes garbage, and no format keeps it.
float require_finite(const float* w, std::uint64_t n, const std::string& tensor);

// Whether a value of `magnitude` stays finite as an IEEE half (at most 65504 once rounded).
bool half_holds(float magnitude);

// Writes the fp32 checkpoint `fp32` as a version-2 file at `path`, the bytes export.py's version2_export
// writes for the same weights. The file appears complete or not at all (written aside, then renamed).
// Refuses (require_finite) a tensor with a non-finite weight, naming it as llama2.c's run.c does.
// `progress(done, total)` is called after each tensor, in bytes of fp32 weights read.
void write_version2(const Checkpoint& fp32, const std::string& path, int group_size,
                    const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

// `ck` with its weights of element type `type` (--weights): itself when its layers' already are (or none is
// asked for), else every matrix converted from fp32 or f16 in memory (q8_0 in default_group_size groups).
// Throws usage_error when a
// conversion would start from anything but fp32, and an Error naming the tensor when one holds a non-finite
// weight (require_finite) or one the conversion's halves cannot hold (f16's weights, ggml's Q8_0 scales).
Checkpoint with_weights(Checkpoint ck, std::optional<ElementType> type);

}  // namespace llamacl
