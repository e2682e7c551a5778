#include "llamacl/ggml_types.hpp"

#include <array>
#include <bit>

#include "llamacl/error.hpp"

namespace llamacl {

namespace {

struct TypeRow {
    std::uint32_t type;
    GgmlTypeInfo info;
};

// ggml.c's type_traits (block size, sizeof the block struct of ggml-common.h) under gguf-py's names.
// Numbers 4, 5 (Q4_2, Q4_3), 31..33 (Q4_0_4_4 ...) and 36..38 (IQ4_NL_4_4 ...) are retired in ggml; 39 and
// up (MXFP4, NVFP4, Q1_0) are newer than GgmlType. Q8_1 is 36 bytes in ggml (gguf-py's table still says 40).
constexpr std::array kTypes{
    TypeRow{0, {"F32", 1, 4, true}},         TypeRow{1, {"F16", 1, 2, true}},
    TypeRow{2, {"Q4_0", 32, 18, true}},      TypeRow{3, {"Q4_1", 32, 20, true}},
    TypeRow{6, {"Q5_0", 32, 22, true}},      TypeRow{7, {"Q5_1", 32, 24, true}},
    TypeRow{8, {"Q8_0", 32, 34, true}},      TypeRow{9, {"Q8_1", 32, 36, false}},
    TypeRow{10, {"Q2_K", 256, 84, true}},    TypeRow{11, {"Q3_K", 256, 110, true}},
    TypeRow{12, {"Q4_K", 256, 144, true}},   TypeRow{13, {"Q5_K", 256, 176, true}},
    TypeRow{14, {"Q6_K", 256, 210, true}},   TypeRow{15, {"Q8_K", 256, 292, false}},
    TypeRow{16, {"IQ2_XXS", 256, 66, false}}, TypeRow{17, {"IQ2_XS", 256, 74, false}},
    TypeRow{18, {"IQ3_XXS", 256, 98, false}}, TypeRow{19, {"IQ1_S", 256, 50, false}},
    TypeRow{20, {"IQ4_NL", 32, 18, false}},  TypeRow{21, {"IQ3_S", 256, 110, false}},
    TypeRow{22, {"IQ2_S", 256, 82, false}},  TypeRow{23, {"IQ4_XS", 256, 136, false}},
    TypeRow{24, {"I8", 1, 1, false}},        TypeRow{25, {"I16", 1, 2, false}},
    TypeRow{26, {"I32", 1, 4, false}},       TypeRow{27, {"I64", 1, 8, false}},
    TypeRow{28, {"F64", 1, 8, false}},       TypeRow{29, {"IQ1_M", 256, 56, false}},
    TypeRow{30, {"BF16", 1, 2, true}},       TypeRow{34, {"TQ1_0", 256, 54, false}},
    TypeRow{35, {"TQ2_0", 256, 66, false}},
};

// --- reading a block's fields (files are little-endian) ---

std::uint8_t byte_at(const std::byte* b, int i) { return std::to_integer<std::uint8_t>(b[i]); }

std::uint16_t u16_at(const std::byte* b, int i) {
    return static_cast<std::uint16_t>(byte_at(b, i) | byte_at(b, i + 1) << 8);
}

std::uint32_t u32_at(const std::byte* b, int i) {
    return static_cast<std::uint32_t>(u16_at(b, i)) | static_cast<std::uint32_t>(u16_at(b, i + 2)) << 16;
}

// IEEE half to float, exactly: subnormal halves are normalized; inf and NaN (payload kept) stay so.
float half_bits_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    int exponent = (h >> 10) & 0x1F;
    std::uint32_t mantissa = h & 0x3FFu;
    if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | mantissa << 13);
    if (exponent == 0) {
        if (mantissa == 0) return std::bit_cast<float>(sign);
        exponent = 1;  // the subnormal's value is mantissa * 2^-24: shift its leading one into the implicit bit
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        mantissa &= 0x3FFu;
    }
    return std::bit_cast<float>(sign | static_cast<std::uint32_t>(exponent + 127 - 15) << 23 | mantissa << 13);
}

float half_at(const std::byte* b, int i) { return half_bits_to_float(u16_at(b, i)); }

float to_float(int v) { return static_cast<float>(v); }

// --- one block each, in ggml-quants.c's dequantize_row_* arithmetic ---

void f32_block(const std::byte* b, float* y) { y[0] = std::bit_cast<float>(u32_at(b, 0)); }

void f16_block(const std::byte* b, float* y) { y[0] = half_at(b, 0); }

// bfloat16 is a float's upper half.
void bf16_block(const std::byte* b, float* y) {
    y[0] = std::bit_cast<float>(static_cast<std::uint32_t>(u16_at(b, 0)) << 16);
}

// d, qs[16]: byte j's low nibble is element j, its high nibble element j + 16; x = (q - 8) * d.
void q4_0_block(const std::byte* b, float* y) {
    const float d = half_at(b, 0);
    for (int j = 0; j < 16; ++j) {
        const std::uint8_t q = byte_at(b, 2 + j);
        y[j] = to_float((q & 0xF) - 8) * d;
        y[j + 16] = to_float((q >> 4) - 8) * d;
    }
}

// d, m, qs[16] packed as in q4_0; x = q * d + m.
void q4_1_block(const std::byte* b, float* y) {
    const float d = half_at(b, 0);
    const float m = half_at(b, 2);
    for (int j = 0; j < 16; ++j) {
        const std::uint8_t q = byte_at(b, 4 + j);
        y[j] = to_float(q & 0xF) * d + m;
        y[j + 16] = to_float(q >> 4) * d + m;
    }
}

// Element j's fifth bit: bit j of the 32-bit qh.
int fifth_bit(std::uint32_t qh, int j) { return static_cast<int>((qh >> j) & 1u) << 4; }

// d, qh (u32), qs[16]: low four bits as in q4_0, the fifth from qh; x = (q - 16) * d.
void q5_0_block(const std::byte* b, float* y) {
    const float d = half_at(b, 0);
    const std::uint32_t qh = u32_at(b, 2);
    for (int j = 0; j < 16; ++j) {
        const std::uint8_t q = byte_at(b, 6 + j);
        y[j] = to_float(((q & 0xF) | fifth_bit(qh, j)) - 16) * d;
        y[j + 16] = to_float(((q >> 4) | fifth_bit(qh, j + 16)) - 16) * d;
    }
}

// d, m, qh (u32), qs[16] packed as in q5_0; x = q * d + m.
void q5_1_block(const std::byte* b, float* y) {
    const float d = half_at(b, 0);
    const float m = half_at(b, 2);
    const std::uint32_t qh = u32_at(b, 4);
    for (int j = 0; j < 16; ++j) {
        const std::uint8_t q = byte_at(b, 8 + j);
        y[j] = to_float((q & 0xF) | fifth_bit(qh, j)) * d + m;
        y[j + 16] = to_float((q >> 4) | fifth_bit(qh, j + 16)) * d + m;
    }
}

// d, qs[32] signed; x = q * d.
void q8_0_block(const std::byte* b, float* y) {
    const float d = half_at(b, 0);
    for (int j = 0; j < 32; ++j) y[j] = to_float(static_cast<std::int8_t>(byte_at(b, 2 + j))) * d;
}

// Q2_K and Q3_K's two low bits of element e: qs[32 * (e / 128) + e % 32], bits 2 * ((e % 128) / 32).
int two_bits(const std::byte* qs, int e) {
    return (byte_at(qs, 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3;
}

// scales[16] (low nibble scale, high nibble min, one pair per 16 elements), qs[64], d, dmin;
// x = (d * scale) * q - (dmin * min).
void q2_k_block(const std::byte* b, float* y) {
    const std::byte* qs = b + 16;
    const float d = half_at(b, 80);
    const float dmin = half_at(b, 82);
    for (int s = 0; s < 16; ++s) {
        const std::uint8_t sc = byte_at(b, s);
        const float dl = d * to_float(sc & 0xF);
        const float ml = dmin * to_float(sc >> 4);
        for (int e = 16 * s; e < 16 * s + 16; ++e) y[e] = dl * to_float(two_bits(qs, e)) - ml;
    }
}

// Q3_K's 6-bit scale i of 16: low four bits from bytes 0..7 (nibble i / 8), high two from byte 8 + i % 4
// (bits 2 * (i / 4)).
int q3_k_scale(const std::byte* scales, int i) {
    const int low = i < 8 ? byte_at(scales, i) & 0xF : byte_at(scales, i - 8) >> 4;
    const int high = (byte_at(scales, 8 + i % 4) >> (2 * (i / 4))) & 3;
    return low | high << 4;
}

// hmask[32], qs[64], scales[12], d: q = two low bits minus 4 unless element e's high bit (hmask[e % 32],
// bit e / 32) is set; x = (d * (scale - 32)) * q, one scale per 16 elements.
void q3_k_block(const std::byte* b, float* y) {
    const std::byte* qs = b + 32;
    const std::byte* scales = b + 96;
    const float d = half_at(b, 108);
    for (int s = 0; s < 16; ++s) {
        const float dl = d * to_float(q3_k_scale(scales, s) - 32);
        for (int e = 16 * s; e < 16 * s + 16; ++e) {
            const bool high = ((byte_at(b, e % 32) >> (e / 32)) & 1) != 0;
            y[e] = dl * to_float(two_bits(qs, e) - (high ? 0 : 4));
        }
    }
}

// Q4_K and Q5_K's 6-bit scale and min of sub-block j of 8 (ggml's get_scale_min_k4): j < 4 in the low six
// bits of bytes j and j + 4; else nibbles of byte j + 4 with the high two bits from bytes j - 4 and j.
struct ScaleMin {
    int scale;
    int min;
};

ScaleMin scale_min_k4(const std::byte* s, int j) {
    if (j < 4) return {byte_at(s, j) & 63, byte_at(s, j + 4) & 63};
    return {(byte_at(s, j + 4) & 0xF) | (byte_at(s, j - 4) >> 6) << 4,
            (byte_at(s, j + 4) >> 4) | (byte_at(s, j) >> 6) << 4};
}

// Q4_K and Q5_K's four low bits of element e: byte 32 * (e / 64) + e % 32, low nibble in the first 32.
int four_bits(const std::byte* qs, int e) {
    const std::uint8_t q = byte_at(qs, 32 * (e / 64) + e % 32);
    return e % 64 < 32 ? q & 0xF : q >> 4;
}

// Q4_K: d, dmin, scales[12], qs[128]: x = (d * scale) * q - (dmin * min), one pair per 32 elements.
// Q5_K: d, dmin, scales[12], qh[32], qs[128]: the same with a fifth bit (16) from qh[e % 32], bit e / 32.
template <bool FifthBit>
void k4_block(const std::byte* b, float* y) {
    const float d = half_at(b, 0);
    const float dmin = half_at(b, 2);
    const std::byte* qs = b + (FifthBit ? 48 : 16);
    for (int s = 0; s < 8; ++s) {
        const ScaleMin sm = scale_min_k4(b + 4, s);
        const float dl = d * to_float(sm.scale);
        const float ml = dmin * to_float(sm.min);
        for (int e = 32 * s; e < 32 * s + 32; ++e) {
            const int high = FifthBit && ((byte_at(b, 16 + e % 32) >> s) & 1) != 0 ? 16 : 0;
            y[e] = dl * to_float(four_bits(qs, e) + high) - ml;
        }
    }
}
void q4_k_block(const std::byte* b, float* y) { k4_block<false>(b, y); }
void q5_k_block(const std::byte* b, float* y) { k4_block<true>(b, y); }

// Q6_K's six bits of element e, in 128-element halves h with r = e % 128, l = r % 32, g = r / 32: the
// low four from ql[64h + l + 32 (g odd)] (high nibble for g >= 2), the top two from qh[32h + l] bits 2g.
int six_bits(const std::byte* ql, const std::byte* qh, int e) {
    const int h = e / 128;
    const int l = e % 32;
    const int g = (e % 128) / 32;
    const std::uint8_t low = byte_at(ql, 64 * h + l + 32 * (g % 2));
    const int low4 = g < 2 ? low & 0xF : low >> 4;
    return low4 | ((byte_at(qh, 32 * h + l) >> (2 * g)) & 3) << 4;
}

// ql[128], qh[64], scales[16] signed, d: x = (d * scale) * (q - 32), one scale per 16 elements.
void q6_k_block(const std::byte* b, float* y) {
    const float d = half_at(b, 208);
    for (int s = 0; s < 16; ++s) {
        const auto scale = static_cast<std::int8_t>(byte_at(b, 192 + s));
        for (int e = 16 * s; e < 16 * s + 16; ++e) y[e] = d * to_float(scale) * to_float(six_bits(b, b + 128, e) - 32);
    }
}

// Every block of `blocks`, each read by ReadBlock.
template <void (*ReadBlock)(const std::byte*, float*)>
void read_blocks(const GgmlTypeInfo& info, const std::byte* data, float* out, std::uint64_t blocks) {
    for (std::uint64_t i = 0; i < blocks; ++i) ReadBlock(data + i * info.block_bytes, out + i * info.block);
}

// Reads `blocks` blocks of a dequantizable type; false for the other types.
bool read_any_blocks(GgmlType type, const GgmlTypeInfo& info, const std::byte* data, float* out,
                     std::uint64_t blocks) {
    switch (type) {
        case GgmlType::f32: read_blocks<f32_block>(info, data, out, blocks); return true;
        case GgmlType::f16: read_blocks<f16_block>(info, data, out, blocks); return true;
        case GgmlType::bf16: read_blocks<bf16_block>(info, data, out, blocks); return true;
        case GgmlType::q4_0: read_blocks<q4_0_block>(info, data, out, blocks); return true;
        case GgmlType::q4_1: read_blocks<q4_1_block>(info, data, out, blocks); return true;
        case GgmlType::q5_0: read_blocks<q5_0_block>(info, data, out, blocks); return true;
        case GgmlType::q5_1: read_blocks<q5_1_block>(info, data, out, blocks); return true;
        case GgmlType::q8_0: read_blocks<q8_0_block>(info, data, out, blocks); return true;
        case GgmlType::q2_k: read_blocks<q2_k_block>(info, data, out, blocks); return true;
        case GgmlType::q3_k: read_blocks<q3_k_block>(info, data, out, blocks); return true;
        case GgmlType::q4_k: read_blocks<q4_k_block>(info, data, out, blocks); return true;
        case GgmlType::q5_k: read_blocks<q5_k_block>(info, data, out, blocks); return true;
        case GgmlType::q6_k: read_blocks<q6_k_block>(info, data, out, blocks); return true;
        default: return false;
    }
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t type) {
    for (const TypeRow& row : kTypes)
        if (row.type == type) return row.info;
    return std::nullopt;
}

std::string ggml_type_name(std::uint32_t type) {
    const std::optional<GgmlTypeInfo> info = ggml_type_info(type);
    return info ? info->name : "type " + std::to_string(type);
}

std::uint64_t ggml_bytes(const GgmlTypeInfo& info, std::uint64_t elements) {
    return elements / info.block * info.block_bytes;
}

void ggml_dequantize(GgmlType type, const std::byte* data, float* out, std::uint64_t elements) {
    const auto number = static_cast<std::uint32_t>(type);
    const std::optional<GgmlTypeInfo> info = ggml_type_info(number);
    if (!info || !info->dequantizable) throw Error("cannot dequantize " + ggml_type_name(number) + " tensors");
    if (elements % info->block != 0)
        throw Error(std::to_string(elements) + " elements are not a whole number of " + info->name + " blocks of " +
                    std::to_string(info->block));
    if (!read_any_blocks(type, *info, data, out, elements / info->block))
        throw Error("cannot dequantize " + ggml_type_name(number) + " tensors");
}

}  // namespace llamacl
