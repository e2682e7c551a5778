#pragma once
// ggml's tensor types as GGUF files store them: each type's name, block of elements and bytes per block,
// and, for the types llama-cl reads, ggml's reference dequantization (dequantize_row_* of ggml-quants.c)
// into f32. Types without a row here (the IQ families, ternary types) are named in messages but refused.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace llamacl {

// ggml_type's numbers, as in the file.
enum class GgmlType : std::uint32_t {
    f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
    q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
    iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22, iq4_xs = 23,
    i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30, tq1_0 = 34, tq2_0 = 35,
};

struct GgmlTypeInfo {
    const char* name;           // gguf-py's spelling: "F32", "Q4_0", "Q6_K", ... (ggml.c's own is "q6_K")
    std::uint32_t block;        // elements per block (1 for plain types)
    std::uint32_t block_bytes;  // bytes per block
    bool dequantizable;         // dequantize() reads it
};

// The table's row for a type number, or nullopt for a number GgmlType lacks (retired in ggml, or newer).
std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t type);
// "Q6_K", or "type 99" for an unknown number: for messages.
std::string ggml_type_name(std::uint32_t type);

// Bytes of `elements` elements (a whole number of blocks) of `type`.
std::uint64_t ggml_bytes(const GgmlTypeInfo& info, std::uint64_t elements);

// out[0 .. elements) = the elements at `data` (a whole number of blocks of `type`) as f32, as ggml's
// reference dequantization computes them (halves and bfloat16 widened exactly). The type must be one the
// table marks dequantizable; throws Error for any other type or a partial block.
void ggml_dequantize(GgmlType type, const std::byte* data, float* out, std::uint64_t elements);

}  // namespace llamacl
