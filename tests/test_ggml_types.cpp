// ggml's type table (ggml_types.hpp) against the sizes in ggml's sources, and the reference dequantization
// against blocks built by hand: specific elements worked out from each format's definition, and whole
// blocks against a second transcription that packs chosen codes the way ggml's quantize_row_*_ref lays
// them out and applies dequantize_row_*'s formula, in its float order, to the codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/ggml_types.hpp"

using namespace llamacl;

namespace {

using Bytes = std::vector<std::byte>;

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

void put_u8(Bytes& b, std::size_t at, unsigned v) { b.at(at) = static_cast<std::byte>(v & 0xFFu); }

void put_u16(Bytes& b, std::size_t at, unsigned v) {
    put_u8(b, at, v);
    put_u8(b, at + 1, v >> 8);
}

void put_u32(Bytes& b, std::size_t at, std::uint32_t v) {
    put_u16(b, at, v & 0xFFFFu);
    put_u16(b, at + 2, v >> 16);
}

Bytes bytes_of(std::initializer_list<unsigned> values) {
    Bytes b(values.size());
    std::size_t i = 0;
    for (const unsigned v : values) put_u8(b, i++, v);
    return b;
}

std::vector<float> dequantize(GgmlType type, const Bytes& data, std::size_t elements) {
    std::vector<float> out(elements, 12345.0f);
    ggml_dequantize(type, data.data(), out.data(), elements);
    return out;
}

// Bit-for-bit equality (so -0 differs from +0 and a NaN must keep its payload).
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(bits(got[i]), bits(want[i])) << "element " << i << ": " << got[i] << " vs " << want[i];
}

// A half's value from IEEE 754's definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m when e is 0.
float half_value(std::uint16_t h) {
    const int e = (h >> 10) & 0x1F;
    const int m = h & 0x3FF;
    const double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return static_cast<float>((h & 0x8000) != 0 ? -magnitude : magnitude);
}

// Halves the whole-block checks use as scales: ordinary, negative, tiny, subnormal, the largest, zero.
constexpr std::array<std::uint16_t, 8> kScales{0x3C00, 0x2E66, 0xB4CD, 0x0400, 0x0001, 0x7BFF, 0x0000, 0xC800};

}  // namespace

// --- the table ---

TEST(GgmlTypes, EveryRowMatchesGgmlsTypeTraits) {
    struct Row {
        std::uint32_t type;
        const char* name;
        std::uint32_t block, bytes;
    };
    // Sizes from ggml-common.h's block structs (QK_K = 256, ggml_half 2 bytes), as ggml.c's type_traits uses.
    const Row rows[] = {
        {0, "F32", 1, 4},
        {1, "F16", 1, 2},
        {2, "Q4_0", 32, 2 + 16},            // d, qs[16]
        {3, "Q4_1", 32, 2 + 2 + 16},        // d, m, qs[16]
        {6, "Q5_0", 32, 2 + 4 + 16},        // d, qh[4], qs[16]
        {7, "Q5_1", 32, 2 + 2 + 4 + 16},    // d, m, qh[4], qs[16]
        {8, "Q8_0", 32, 2 + 32},            // d, qs[32]
        {9, "Q8_1", 32, 2 + 2 + 32},        // d, s, qs[32]
        {10, "Q2_K", 256, 16 + 64 + 2 + 2},  // scales, qs, d, dmin
        {11, "Q3_K", 256, 32 + 64 + 12 + 2}, // hmask, qs, scales, d
        {12, "Q4_K", 256, 2 + 2 + 12 + 128},
        {13, "Q5_K", 256, 2 + 2 + 12 + 32 + 128},
        {14, "Q6_K", 256, 128 + 64 + 16 + 2},
        {15, "Q8_K", 256, 4 + 256 + 16 * 2},  // float d, qs, int16 bsums[16]
        {16, "IQ2_XXS", 256, 2 + 32 * 2},
        {17, "IQ2_XS", 256, 2 + 32 * 2 + 8},
        {18, "IQ3_XXS", 256, 2 + 3 * 32},
        {19, "IQ1_S", 256, 2 + 32 + 16},
        {20, "IQ4_NL", 32, 2 + 16},
        {21, "IQ3_S", 256, 2 + 13 * 8 + 4},
        {22, "IQ2_S", 256, 2 + 64 + 16},
        {23, "IQ4_XS", 256, 2 + 2 + 4 + 128},
        {24, "I8", 1, 1},
        {25, "I16", 1, 2},
        {26, "I32", 1, 4},
        {27, "I64", 1, 8},
        {28, "F64", 1, 8},
        {29, "IQ1_M", 256, 32 + 16 + 8},
        {30, "BF16", 1, 2},
        {34, "TQ1_0", 256, 48 + 4 + 2},
        {35, "TQ2_0", 256, 64 + 2},
    };
    for (const Row& row : rows) {
        const std::optional<GgmlTypeInfo> info = ggml_type_info(row.type);
        ASSERT_TRUE(info.has_value()) << row.name;
        EXPECT_STREQ(info->name, row.name);
        EXPECT_EQ(info->block, row.block) << row.name;
        EXPECT_EQ(info->block_bytes, row.bytes) << row.name;
        EXPECT_EQ(ggml_type_name(row.type), row.name);
    }
    // The sizes the brief quotes, spelled out once more.
    EXPECT_EQ(ggml_type_info(2)->block_bytes, 18u);
    EXPECT_EQ(ggml_type_info(14)->block_bytes, 210u);
    EXPECT_EQ(ggml_type_info(15)->block_bytes, 292u);
}

TEST(GgmlTypes, NumbersGgmlDoesNotDefineHaveNoRow) {
    for (const std::uint32_t type : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 99u, 0xFFFFFFFFu})
        EXPECT_FALSE(ggml_type_info(type).has_value()) << type;
    EXPECT_EQ(ggml_type_name(99), "type 99");
    EXPECT_EQ(ggml_type_name(4), "type 4");
}

TEST(GgmlTypes, ExactlyTheReferenceTypesAreDequantizable) {
    const std::vector<std::uint32_t> readable{0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30};
    for (std::uint32_t type = 0; type < 64; ++type) {
        const std::optional<GgmlTypeInfo> info = ggml_type_info(type);
        if (!info) continue;
        const bool expected = std::find(readable.begin(), readable.end(), type) != readable.end();
        EXPECT_EQ(info->dequantizable, expected) << info->name;
    }
}

TEST(GgmlTypes, BytesCountWholeBlocks) {
    EXPECT_EQ(ggml_bytes(*ggml_type_info(0), 3), 12u);
    EXPECT_EQ(ggml_bytes(*ggml_type_info(2), 64), 36u);
    EXPECT_EQ(ggml_bytes(*ggml_type_info(14), 512), 420u);
    EXPECT_EQ(ggml_bytes(*ggml_type_info(30), 5), 10u);
    EXPECT_EQ(ggml_bytes(*ggml_type_info(12), std::uint64_t{1} << 32), (std::uint64_t{1} << 24) * 144);
}

TEST(GgmlTypes, DequantizeRefusesOtherTypesAndPartialBlocks) {
    Bytes data(292 * 2);
    std::vector<float> out(512);
    EXPECT_THROW(ggml_dequantize(GgmlType::q8_k, data.data(), out.data(), 256), Error);
    EXPECT_THROW(ggml_dequantize(GgmlType::iq2_xxs, data.data(), out.data(), 256), Error);
    EXPECT_THROW(ggml_dequantize(GgmlType::i8, data.data(), out.data(), 4), Error);
    EXPECT_THROW(ggml_dequantize(static_cast<GgmlType>(99), data.data(), out.data(), 4), Error);
    EXPECT_THROW(ggml_dequantize(GgmlType::q4_0, data.data(), out.data(), 31), Error);
    EXPECT_THROW(ggml_dequantize(GgmlType::q6_k, data.data(), out.data(), 300), Error);
    EXPECT_NO_THROW(ggml_dequantize(GgmlType::q4_0, data.data(), out.data(), 0));
}

// --- plain types ---

TEST(GgmlTypes, F32PassesBitsThrough) {
    const std::vector<std::uint32_t> patterns{0x3F800000, 0x80000000, 0x7F800000, 0x7FA00001, 0xFFC12345, 0x00000001};
    Bytes data(4 * patterns.size());
    for (std::size_t i = 0; i < patterns.size(); ++i) put_u32(data, 4 * i, patterns[i]);
    const std::vector<float> got = dequantize(GgmlType::f32, data, patterns.size());
    for (std::size_t i = 0; i < patterns.size(); ++i) EXPECT_EQ(bits(got[i]), patterns[i]) << i;
}

TEST(GgmlTypes, F16SpecialValuesByHand) {
    const Bytes data = bytes_of({0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00, 0xFF, 0x03, 0x00, 0x04, 0x00, 0x80,
                                 0x00, 0x7C, 0x00, 0xFC, 0x00, 0x7E, 0x01, 0x7D, 0x55, 0x35});
    const std::vector<float> got = dequantize(GgmlType::f16, data, 12);
    EXPECT_EQ(got[0], 1.0f);                             // 0x3C00
    EXPECT_EQ(got[1], -2.0f);                            // 0xC000
    EXPECT_EQ(got[2], 65504.0f);                         // 0x7BFF, the largest half
    EXPECT_EQ(got[3], std::ldexp(1.0f, -24));            // 0x0001, the smallest subnormal
    EXPECT_EQ(got[4], std::ldexp(1023.0f, -24));         // 0x03FF, the largest subnormal
    EXPECT_EQ(got[5], std::ldexp(1.0f, -14));            // 0x0400, the smallest normal
    EXPECT_EQ(bits(got[6]), 0x80000000u);                // 0x8000, -0
    EXPECT_EQ(bits(got[7]), 0x7F800000u);                // 0x7C00, +inf
    EXPECT_EQ(bits(got[8]), 0xFF800000u);                // 0xFC00, -inf
    EXPECT_EQ(bits(got[9]), 0x7FC00000u);                // 0x7E00, quiet NaN
    EXPECT_EQ(bits(got[10]), 0x7FA02000u);               // 0x7D01, a signalling NaN's payload shifted up
    EXPECT_EQ(got[11], 0.333251953125f);                 // 0x3555: 1.0101010101b * 2^-2 = 1365/4096
}

TEST(GgmlTypes, F16EveryHalfIsExact) {
    Bytes data(2 * 65536);
    for (unsigned h = 0; h < 65536; ++h) put_u16(data, 2 * h, h);
    const std::vector<float> got = dequantize(GgmlType::f16, data, 65536);
    for (unsigned h = 0; h < 65536; ++h) {
        const std::uint16_t half = static_cast<std::uint16_t>(h);
        const std::uint32_t sign = (h & 0x8000u) << 16;
        if ((h & 0x7C00u) == 0x7C00u) {  // inf and NaN: all-ones exponent, the mantissa shifted up
            EXPECT_EQ(bits(got[h]), sign | 0x7F800000u | (h & 0x3FFu) << 13) << std::hex << h;
        } else {
            EXPECT_EQ(bits(got[h]), bits(half_value(half))) << std::hex << h;
        }
    }
}

TEST(GgmlTypes, Bf16IsTheUpperHalfOfAFloat) {
    const Bytes data = bytes_of({0x80, 0x3F, 0x40, 0xC0, 0x49, 0x40, 0x7F, 0x7F, 0x01, 0x00, 0x00, 0x80, 0x80, 0x7F,
                                 0x80, 0xFF, 0xC1, 0x7F, 0x81, 0xFF});
    const std::vector<float> got = dequantize(GgmlType::bf16, data, 10);
    EXPECT_EQ(got[0], 1.0f);
    EXPECT_EQ(got[1], -3.0f);
    EXPECT_EQ(got[2], 3.140625f);
    EXPECT_EQ(got[3], std::ldexp(255.0f, 120));      // 0x7F7F: the largest bfloat16, 1.1111111b * 2^127
    EXPECT_EQ(got[4], std::ldexp(1.0f, -133));       // 0x0001: a subnormal float
    EXPECT_EQ(bits(got[5]), 0x80000000u);            // -0
    EXPECT_EQ(bits(got[6]), 0x7F800000u);            // +inf
    EXPECT_EQ(bits(got[7]), 0xFF800000u);            // -inf
    EXPECT_EQ(bits(got[8]), 0x7FC10000u);            // NaN, payload kept
    EXPECT_EQ(bits(got[9]), 0xFF810000u);            // signalling NaN, kept
}

// --- 32-element blocks ---

TEST(GgmlTypes, Q4_0ByHand) {
    // Block 0: d = 1, byte j = (j) | (15 - j) << 4, so element j is j - 8 and element j + 16 is 7 - j.
    // Block 1: d = 65504 (the largest half), every byte 0xF0: elements 0..15 are -8d, 16..31 are 7d.
    // Block 2: d = +0, every byte 0: (0 - 8) * +0 is -0.
    Bytes data(3 * 18);
    put_u16(data, 0, 0x3C00);
    for (unsigned j = 0; j < 16; ++j) put_u8(data, 2 + j, j | (15 - j) << 4);
    put_u16(data, 18, 0x7BFF);
    for (unsigned j = 0; j < 16; ++j) put_u8(data, 20 + j, 0xF0);
    const std::vector<float> got = dequantize(GgmlType::q4_0, data, 96);
    EXPECT_EQ(got[0], -8.0f);
    EXPECT_EQ(got[5], -3.0f);
    EXPECT_EQ(got[8], 0.0f);
    EXPECT_EQ(got[15], 7.0f);
    EXPECT_EQ(got[16], 7.0f);
    EXPECT_EQ(got[23], 0.0f);
    EXPECT_EQ(got[31], -8.0f);
    EXPECT_EQ(got[32], -524032.0f);
    EXPECT_EQ(got[47], -524032.0f);
    EXPECT_EQ(got[48], 458528.0f);
    EXPECT_EQ(got[63], 458528.0f);
    for (int i = 64; i < 96; ++i) EXPECT_EQ(bits(got[static_cast<std::size_t>(i)]), 0x80000000u) << i;
}

TEST(GgmlTypes, Q4_1ByHand) {
    // d = 0.25, m = -1.5, byte j = j | (15 - j) << 4: element j is j/4 - 1.5, element j + 16 is (15 - j)/4 - 1.5.
    Bytes data(20);
    put_u16(data, 0, 0x3400);
    put_u16(data, 2, 0xBE00);
    for (unsigned j = 0; j < 16; ++j) put_u8(data, 4 + j, j | (15 - j) << 4);
    const std::vector<float> got = dequantize(GgmlType::q4_1, data, 32);
    EXPECT_EQ(got[0], -1.5f);
    EXPECT_EQ(got[6], 0.0f);
    EXPECT_EQ(got[15], 2.25f);
    EXPECT_EQ(got[16], 2.25f);
    EXPECT_EQ(got[28], -0.75f);
    EXPECT_EQ(got[31], -1.5f);
}

TEST(GgmlTypes, Q5_0ByHand) {
    // d = -2, qh = 0xFFF0000F (fifth bits of elements 0..3 and 20..31), byte j = j | (15 - j) << 4:
    // element j < 4 is j, 4 <= j < 16 is j - 16; element 16 + j is -1 - j for j < 4, 15 - j after; times -2.
    Bytes data(22);
    put_u16(data, 0, 0xC000);
    put_u32(data, 2, 0xFFF0000Fu);
    for (unsigned j = 0; j < 16; ++j) put_u8(data, 6 + j, j | (15 - j) << 4);
    const std::vector<float> got = dequantize(GgmlType::q5_0, data, 32);
    EXPECT_EQ(bits(got[0]), 0x80000000u);  // 0 * -2 is -0
    EXPECT_EQ(got[3], -6.0f);
    EXPECT_EQ(got[4], 24.0f);
    EXPECT_EQ(got[15], 2.0f);
    EXPECT_EQ(got[16], 2.0f);
    EXPECT_EQ(got[19], 8.0f);
    EXPECT_EQ(got[20], -22.0f);
    EXPECT_EQ(bits(got[31]), 0x80000000u);
}

TEST(GgmlTypes, Q5_1ByHand) {
    // d = 0.5, m = 1, qh and bytes as in Q5_0ByHand: q(0) = 16, q(3) = 19, q(4) = 4, q(15) = 15, q(16) = 15,
    // q(19) = 12, q(20) = 27, q(31) = 16; x = q/2 + 1.
    Bytes data(24);
    put_u16(data, 0, 0x3800);
    put_u16(data, 2, 0x3C00);
    put_u32(data, 4, 0xFFF0000Fu);
    for (unsigned j = 0; j < 16; ++j) put_u8(data, 8 + j, j | (15 - j) << 4);
    const std::vector<float> got = dequantize(GgmlType::q5_1, data, 32);
    EXPECT_EQ(got[0], 9.0f);
    EXPECT_EQ(got[3], 10.5f);
    EXPECT_EQ(got[4], 3.0f);
    EXPECT_EQ(got[15], 8.5f);
    EXPECT_EQ(got[16], 8.5f);
    EXPECT_EQ(got[19], 7.0f);
    EXPECT_EQ(got[20], 14.5f);
    EXPECT_EQ(got[31], 9.0f);
}

TEST(GgmlTypes, Q8_0ByHand) {
    // Block 0: d = 0.5, q(j) = 8j - 128. Block 1: d = 65504, q = -128, 127, then 1.
    Bytes data(2 * 34);
    put_u16(data, 0, 0x3800);
    for (unsigned j = 0; j < 32; ++j) put_u8(data, 2 + j, 8 * j + 128);  // 8j - 128 as a two's complement byte
    put_u16(data, 34, 0x7BFF);
    put_u8(data, 36, 0x80);
    put_u8(data, 37, 0x7F);
    for (unsigned j = 2; j < 32; ++j) put_u8(data, 36 + j, 1);
    const std::vector<float> got = dequantize(GgmlType::q8_0, data, 64);
    EXPECT_EQ(got[0], -64.0f);
    EXPECT_EQ(got[16], 0.0f);
    EXPECT_EQ(got[31], 60.0f);
    EXPECT_EQ(got[32], -8384512.0f);
    EXPECT_EQ(got[33], 8319008.0f);
    EXPECT_EQ(got[63], 65504.0f);
}

TEST(GgmlTypes, SmallBlocksMatchATranscription) {
    // Random codes in every layout, packed as quantize_row_q{4_0,4_1,5_0,5_1,8_0}_ref packs them (element j
    // in the low nibble of byte j, j + 16 in the high nibble, fifth bits in qh bit j), then ggml's formulas.
    std::mt19937 rng(7);
    for (const std::uint16_t d16 : kScales) {
        const std::uint16_t m16 = static_cast<std::uint16_t>(rng() & 0xFBFF);  // any finite half
        const float d = half_value(d16), m = half_value(m16);
        std::array<int, 32> q{};
        for (int& v : q) v = static_cast<int>(rng() & 31);

        Bytes q4_0(18), q4_1(20), q5_0(22), q5_1(24), q8_0(34);
        put_u16(q4_0, 0, d16);
        put_u16(q4_1, 0, d16);
        put_u16(q4_1, 2, m16);
        put_u16(q5_0, 0, d16);
        put_u16(q5_1, 0, d16);
        put_u16(q5_1, 2, m16);
        put_u16(q8_0, 0, d16);
        std::uint32_t qh = 0;
        for (unsigned j = 0; j < 16; ++j) {
            put_u8(q4_0, 2 + j, (q[j] & 15) | (q[j + 16] & 15) << 4);
            put_u8(q4_1, 4 + j, (q[j] & 15) | (q[j + 16] & 15) << 4);
            put_u8(q5_0, 6 + j, (q[j] & 15) | (q[j + 16] & 15) << 4);
            put_u8(q5_1, 8 + j, (q[j] & 15) | (q[j + 16] & 15) << 4);
            qh |= static_cast<std::uint32_t>(q[j] >> 4) << j | static_cast<std::uint32_t>(q[j + 16] >> 4) << (j + 16);
        }
        put_u32(q5_0, 2, qh);
        put_u32(q5_1, 4, qh);
        for (unsigned j = 0; j < 32; ++j) put_u8(q8_0, 2 + j, static_cast<unsigned>(q[j] * 8 - 128));

        std::vector<float> w4_0(32), w4_1(32), w5_0(32), w5_1(32), w8_0(32);
        for (std::size_t j = 0; j < 32; ++j) {
            w4_0[j] = static_cast<float>((q[j] & 15) - 8) * d;
            w4_1[j] = static_cast<float>(q[j] & 15) * d + m;
            w5_0[j] = static_cast<float>(q[j] - 16) * d;
            w5_1[j] = static_cast<float>(q[j]) * d + m;
            w8_0[j] = static_cast<float>(q[j] * 8 - 128) * d;
        }
        SCOPED_TRACE(d);
        expect_same_bits(dequantize(GgmlType::q4_0, q4_0, 32), w4_0);
        expect_same_bits(dequantize(GgmlType::q4_1, q4_1, 32), w4_1);
        expect_same_bits(dequantize(GgmlType::q5_0, q5_0, 32), w5_0);
        expect_same_bits(dequantize(GgmlType::q5_1, q5_1, 32), w5_1);
        expect_same_bits(dequantize(GgmlType::q8_0, q8_0, 32), w8_0);
    }
}

// --- K-quants (256-element super-blocks) by hand ---

TEST(GgmlTypes, Q2_KByHand) {
    // scales[k] = k | (15 - k) << 4 (scale k, min 15 - k for elements 16k..16k+15), every qs byte 0xE4 (2-bit
    // fields 0, 1, 2, 3: element e's quant is (e % 128) / 32), d = 1, dmin = 0.5: x = scale * q - min / 2.
    Bytes data(84);
    for (unsigned k = 0; k < 16; ++k) put_u8(data, k, k | (15 - k) << 4);
    for (unsigned i = 16; i < 80; ++i) put_u8(data, i, 0xE4);
    put_u16(data, 80, 0x3C00);
    put_u16(data, 82, 0x3800);
    const std::vector<float> got = dequantize(GgmlType::q2_k, data, 256);
    EXPECT_EQ(got[0], -7.5f);    // scale 0, min 15, q 0
    EXPECT_EQ(got[40], -4.5f);   // scale 2, min 13, q 1
    EXPECT_EQ(got[100], 13.5f);  // scale 6, min 9, q 3
    EXPECT_EQ(got[130], -3.5f);  // scale 8, min 7, q 0
    EXPECT_EQ(got[200], 22.5f);  // scale 12, min 3, q 2
    EXPECT_EQ(got[255], 45.0f);  // scale 15, min 0, q 3
}

TEST(GgmlTypes, Q3_KByHand) {
    // Scale codes: bytes 0..7 give the low nibbles (scale k < 8 in byte k's low nibble, k >= 8 in byte k - 8's
    // high one), bytes 8..11 the top two bits (scale k in byte 8 + k % 4, bits 2 * (k / 4)). Byte 0 = 0x1F,
    // bytes 1..7 = 0x11, byte 8 = 0xA9, bytes 9..11 = 0xAA: code 0 is 0xF | 1 << 4 = 31 (scale -1), the
    // others 1 | 2 << 4 = 33 (scale +1). qs all 0xE4: low bits (e % 128) / 32. hmask all set but byte 0 bit 0
    // (element 0) and byte 2 bit 4 (element 130): those lose 4. d = 0.5: x = 0.5 * (code - 32) * q.
    Bytes data(110);
    for (unsigned i = 0; i < 32; ++i) put_u8(data, i, 0xFF);
    put_u8(data, 0, 0xFE);
    put_u8(data, 2, 0xEF);
    for (unsigned i = 32; i < 96; ++i) put_u8(data, i, 0xE4);
    put_u8(data, 96, 0x1F);
    for (unsigned i = 97; i < 104; ++i) put_u8(data, i, 0x11);
    put_u8(data, 104, 0xA9);
    for (unsigned i = 105; i < 108; ++i) put_u8(data, i, 0xAA);
    put_u16(data, 108, 0x3800);
    const std::vector<float> got = dequantize(GgmlType::q3_k, data, 256);
    EXPECT_EQ(got[0], 2.0f);                      // -0.5 * (0 - 4)
    EXPECT_EQ(bits(got[1]), 0x80000000u);         // -0.5 * 0 is -0
    EXPECT_EQ(got[32], 0.5f);                     // 0.5 * 1
    EXPECT_EQ(got[98], 1.5f);                     // 0.5 * 3
    EXPECT_EQ(got[130], -2.0f);                   // 0.5 * (0 - 4)
    EXPECT_EQ(got[200], 1.0f);                    // 0.5 * 2
    EXPECT_EQ(got[255], 1.5f);                    // 0.5 * 3
}

// Scale and min bytes shared by the Q4_K and Q5_K hand tests: sub-block (scale, min) = (1, 4), (2, 0),
// (3, 1), (63, 63), (5 | 1 << 4, 2 | 2 << 4) = (21, 34), (0, 0), (7, 15), (15, 1).
const std::array<unsigned, 12> kHandScalesK4{0x41, 0x02, 0x03, 0x3F, 0x84, 0x00, 0x01, 0x3F, 0x25, 0x00, 0xF7, 0x1F};

TEST(GgmlTypes, Q4_KByHand) {
    // d = 1, dmin = 0.25, every qs byte 0x3A: quant 10 in each 64's first 32 elements, 3 in the second.
    Bytes data(144);
    put_u16(data, 0, 0x3C00);
    put_u16(data, 2, 0x3400);
    for (unsigned i = 0; i < 12; ++i) put_u8(data, 4 + i, kHandScalesK4[i]);
    for (unsigned i = 16; i < 144; ++i) put_u8(data, i, 0x3A);
    const std::vector<float> got = dequantize(GgmlType::q4_k, data, 256);
    EXPECT_EQ(got[0], 9.0f);         // 1 * 10 - 4/4
    EXPECT_EQ(got[40], 6.0f);        // 2 * 3 - 0
    EXPECT_EQ(got[70], 29.75f);      // 3 * 10 - 1/4
    EXPECT_EQ(got[100], 173.25f);    // 63 * 3 - 63/4
    EXPECT_EQ(got[130], 201.5f);     // 21 * 10 - 34/4
    EXPECT_EQ(bits(got[170]), 0u);   // 0 * 3 - 0
    EXPECT_EQ(got[200], 66.25f);     // 7 * 10 - 15/4
    EXPECT_EQ(got[255], 44.75f);     // 15 * 3 - 1/4
}

TEST(GgmlTypes, Q5_KByHand) {
    // As Q4_KByHand, with every qh byte 0x55: sub-blocks 0, 2, 4, 6 (bit e / 32) add 16 to the quant.
    Bytes data(176);
    put_u16(data, 0, 0x3C00);
    put_u16(data, 2, 0x3400);
    for (unsigned i = 0; i < 12; ++i) put_u8(data, 4 + i, kHandScalesK4[i]);
    for (unsigned i = 16; i < 48; ++i) put_u8(data, i, 0x55);
    for (unsigned i = 48; i < 176; ++i) put_u8(data, i, 0x3A);
    const std::vector<float> got = dequantize(GgmlType::q5_k, data, 256);
    EXPECT_EQ(got[0], 25.0f);      // 1 * 26 - 1
    EXPECT_EQ(got[40], 6.0f);      // 2 * 3
    EXPECT_EQ(got[70], 77.75f);    // 3 * 26 - 0.25
    EXPECT_EQ(got[100], 173.25f);  // 63 * 3 - 15.75
    EXPECT_EQ(got[130], 537.5f);   // 21 * 26 - 8.5
    EXPECT_EQ(got[200], 178.25f);  // 7 * 26 - 3.75
    EXPECT_EQ(got[255], 44.75f);   // 15 * 3 - 0.25
}

TEST(GgmlTypes, Q6_KByHand) {
    // ql all 0x21, qh all 0xE4, scales[k] = k - 8, d = 0.5. In each 128, group g = (e % 128) / 32 takes the
    // low nibble (1) for g < 2, the high (2) after, and qh bits 2g (g): q = 1 - 32, 17 - 32, 34 - 32, 50 - 32.
    Bytes data(210);
    for (unsigned i = 0; i < 128; ++i) put_u8(data, i, 0x21);
    for (unsigned i = 128; i < 192; ++i) put_u8(data, i, 0xE4);
    for (unsigned k = 0; k < 16; ++k) put_u8(data, 192 + k, k - 8);
    put_u16(data, 208, 0x3800);
    const std::vector<float> got = dequantize(GgmlType::q6_k, data, 256);
    EXPECT_EQ(got[0], 124.0f);               // 0.5 * -8 * -31
    EXPECT_EQ(got[40], 45.0f);               // 0.5 * -6 * -15
    EXPECT_EQ(got[70], -4.0f);               // 0.5 * -4 * 2
    EXPECT_EQ(got[127], -9.0f);              // 0.5 * -1 * 18
    EXPECT_EQ(bits(got[136]), 0x80000000u);  // 0.5 * 0 * -31 is -0
    EXPECT_EQ(got[200], 4.0f);               // 0.5 * 4 * 2
    EXPECT_EQ(got[255], 63.0f);              // 0.5 * 7 * 18
}

// --- K-quants against a transcription: codes packed as quantize_row_*_ref lays them out ---

namespace {

// Pack a 256-element run of 2-bit fields: byte 32 * (n / 128) + l holds elements n + l, n + l + 32, + 64,
// + 96 in bits 0, 2, 4, 6.
void pack_two_bit_fields(Bytes& b, std::size_t at, const std::array<int, 256>& fields) {
    for (std::size_t n = 0; n < 256; n += 128)
        for (std::size_t l = 0; l < 32; ++l)
            put_u8(b, at + n / 4 + l,
                   static_cast<unsigned>(fields[n + l] | fields[n + l + 32] << 2 | fields[n + l + 64] << 4 |
                                         fields[n + l + 96] << 6));
}

// Q4_K and Q5_K's 12 scale bytes for 8 (scale, min) pairs of 6 bits.
void pack_scales_k4(Bytes& b, std::size_t at, const std::array<int, 8>& sc, const std::array<int, 8>& mn) {
    std::array<unsigned, 12> s{};
    for (std::size_t j = 0; j < 8; ++j) {
        const auto ls = static_cast<unsigned>(sc[j]), lm = static_cast<unsigned>(mn[j]);
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (ls & 0xF) | (lm & 0xF) << 4;
            s[j - 4] |= (ls >> 4) << 6;
            s[j] |= (lm >> 4) << 6;
        }
    }
    for (std::size_t i = 0; i < 12; ++i) put_u8(b, at + i, s[i]);
}

template <std::size_t N>
std::array<int, N> random_codes(std::mt19937& rng, int lo, int hi) {
    std::array<int, N> codes{};
    for (int& c : codes) c = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1));
    codes[0] = hi;  // both ends of the range in every block
    codes[1] = lo;
    return codes;
}

struct Case {
    Bytes data;
    std::vector<float> want;
};

// Eight blocks, each with its own d (and dmin) from kScales, through one call.
template <typename MakeBlock>
Case eight_blocks(MakeBlock make_block) {
    Case c;
    std::mt19937 rng(2024);
    for (std::size_t i = 0; i < kScales.size(); ++i) make_block(rng, kScales[i], kScales[(i + 3) % kScales.size()], c);
    return c;
}

}  // namespace

TEST(GgmlTypes, Q2_KMatchesATranscription) {
    const Case c = eight_blocks([](std::mt19937& rng, std::uint16_t d16, std::uint16_t dmin16, Case& out) {
        const auto sc = random_codes<16>(rng, 0, 15), mn = random_codes<16>(rng, 0, 15);
        const auto q = random_codes<256>(rng, 0, 3);
        Bytes b(84);
        for (std::size_t k = 0; k < 16; ++k) put_u8(b, k, static_cast<unsigned>(sc[k] | mn[k] << 4));
        pack_two_bit_fields(b, 16, q);
        put_u16(b, 80, d16);
        put_u16(b, 82, dmin16);
        out.data.insert(out.data.end(), b.begin(), b.end());
        const float d = half_value(d16), dmin = half_value(dmin16);
        for (std::size_t e = 0; e < 256; ++e) {
            const float dl = d * static_cast<float>(sc[e / 16]), ml = dmin * static_cast<float>(mn[e / 16]);
            out.want.push_back(dl * static_cast<float>(q[e]) - ml);
        }
    });
    expect_same_bits(dequantize(GgmlType::q2_k, c.data, c.want.size()), c.want);
}

TEST(GgmlTypes, Q3_KMatchesATranscription) {
    const Case c = eight_blocks([](std::mt19937& rng, std::uint16_t d16, std::uint16_t, Case& out) {
        const auto codes = random_codes<16>(rng, 0, 63);
        const auto q = random_codes<256>(rng, -4, 3);
        Bytes b(110);
        // Stored quant L = q + 4; a set high bit (hmask[e % 32], bit e / 32) stands for L >= 4.
        std::array<int, 256> low{};
        for (std::size_t e = 0; e < 256; ++e) {
            const int stored = q[e] + 4;
            if (stored > 3) put_u8(b, e % 32, std::to_integer<unsigned>(b[e % 32]) | 1u << (e / 32));
            low[e] = stored & 3;
        }
        pack_two_bit_fields(b, 32, low);
        std::array<unsigned, 12> s{};
        for (std::size_t j = 0; j < 16; ++j) {
            const auto l = static_cast<unsigned>(codes[j]);
            if (j < 8)
                s[j] = l & 0xF;
            else
                s[j - 8] |= (l & 0xF) << 4;
            s[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
        }
        for (std::size_t i = 0; i < 12; ++i) put_u8(b, 96 + i, s[i]);
        put_u16(b, 108, d16);
        out.data.insert(out.data.end(), b.begin(), b.end());
        const float d = half_value(d16);
        for (std::size_t e = 0; e < 256; ++e) {
            const float dl = d * static_cast<float>(codes[e / 16] - 32);
            out.want.push_back(dl * static_cast<float>(q[e]));
        }
    });
    expect_same_bits(dequantize(GgmlType::q3_k, c.data, c.want.size()), c.want);
}

TEST(GgmlTypes, Q4_KMatchesATranscription) {
    const Case c = eight_blocks([](std::mt19937& rng, std::uint16_t d16, std::uint16_t dmin16, Case& out) {
        const auto sc = random_codes<8>(rng, 0, 63), mn = random_codes<8>(rng, 0, 63);
        const auto q = random_codes<256>(rng, 0, 15);
        Bytes b(144);
        put_u16(b, 0, d16);
        put_u16(b, 2, dmin16);
        pack_scales_k4(b, 4, sc, mn);
        // Each 64 elements share 32 bytes: the first 32 in the low nibbles, the next 32 in the high ones.
        for (std::size_t n = 0; n < 256; n += 64)
            for (std::size_t l = 0; l < 32; ++l)
                put_u8(b, 16 + n / 2 + l, static_cast<unsigned>(q[n + l] | q[n + l + 32] << 4));
        out.data.insert(out.data.end(), b.begin(), b.end());
        const float d = half_value(d16), dmin = half_value(dmin16);
        for (std::size_t e = 0; e < 256; ++e) {
            const float dl = d * static_cast<float>(sc[e / 32]), ml = dmin * static_cast<float>(mn[e / 32]);
            out.want.push_back(dl * static_cast<float>(q[e]) - ml);
        }
    });
    expect_same_bits(dequantize(GgmlType::q4_k, c.data, c.want.size()), c.want);
}

TEST(GgmlTypes, Q5_KMatchesATranscription) {
    const Case c = eight_blocks([](std::mt19937& rng, std::uint16_t d16, std::uint16_t dmin16, Case& out) {
        const auto sc = random_codes<8>(rng, 0, 63), mn = random_codes<8>(rng, 0, 63);
        const auto q = random_codes<256>(rng, 0, 31);
        Bytes b(176);
        put_u16(b, 0, d16);
        put_u16(b, 2, dmin16);
        pack_scales_k4(b, 4, sc, mn);
        // Low four bits as in Q4_K; the fifth of element n + j (n a multiple of 64) in qh[j] bit n / 32,
        // of element n + j + 32 in bit n / 32 + 1.
        std::array<unsigned, 32> qh{};
        for (std::size_t n = 0; n < 256; n += 64)
            for (std::size_t j = 0; j < 32; ++j) {
                const int l1 = q[n + j], l2 = q[n + j + 32];
                if (l1 > 15) qh[j] |= 1u << (n / 32);
                if (l2 > 15) qh[j] |= 2u << (n / 32);
                put_u8(b, 48 + n / 2 + j, static_cast<unsigned>((l1 & 15) | (l2 & 15) << 4));
            }
        for (std::size_t j = 0; j < 32; ++j) put_u8(b, 16 + j, qh[j]);
        out.data.insert(out.data.end(), b.begin(), b.end());
        const float d = half_value(d16), dmin = half_value(dmin16);
        for (std::size_t e = 0; e < 256; ++e) {
            const float dl = d * static_cast<float>(sc[e / 32]), ml = dmin * static_cast<float>(mn[e / 32]);
            out.want.push_back(dl * static_cast<float>(q[e]) - ml);
        }
    });
    expect_same_bits(dequantize(GgmlType::q5_k, c.data, c.want.size()), c.want);
}

TEST(GgmlTypes, Q6_KMatchesATranscription) {
    const Case c = eight_blocks([](std::mt19937& rng, std::uint16_t d16, std::uint16_t, Case& out) {
        const auto sc = random_codes<16>(rng, -128, 127);
        const auto q = random_codes<256>(rng, -32, 31);
        Bytes b(210);
        // Stored L = q + 32. Per 128 elements n: ql[n/2 + l] = L[n+l] low | L[n+l+64] low << 4,
        // ql[n/2 + l + 32] = L[n+l+32] low | L[n+l+96] low << 4, qh[n/4 + l] = the four top-two-bit pairs.
        std::array<int, 256> stored{};
        for (std::size_t e = 0; e < 256; ++e) stored[e] = q[e] + 32;
        for (std::size_t n = 0; n < 256; n += 128)
            for (std::size_t l = 0; l < 32; ++l) {
                const int l0 = stored[n + l], l1 = stored[n + l + 32], l2 = stored[n + l + 64], l3 = stored[n + l + 96];
                put_u8(b, n / 2 + l, static_cast<unsigned>((l0 & 15) | (l2 & 15) << 4));
                put_u8(b, n / 2 + l + 32, static_cast<unsigned>((l1 & 15) | (l3 & 15) << 4));
                put_u8(b, 128 + n / 4 + l,
                       static_cast<unsigned>(l0 >> 4 | (l1 >> 4) << 2 | (l2 >> 4) << 4 | (l3 >> 4) << 6));
            }
        for (std::size_t k = 0; k < 16; ++k) put_u8(b, 192 + k, static_cast<unsigned>(sc[k]));
        put_u16(b, 208, d16);
        out.data.insert(out.data.end(), b.begin(), b.end());
        const float d = half_value(d16);
        for (std::size_t e = 0; e < 256; ++e)
            out.want.push_back(d * static_cast<float>(sc[e / 16]) * static_cast<float>(q[e]));
    });
    expect_same_bits(dequantize(GgmlType::q6_k, c.data, c.want.size()), c.want);
}
