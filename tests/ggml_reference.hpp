#pragma once
// A scalar transcription of ggml's reference (ggml-quants.c, ggml-impl.h): its half conversion and the
// Q4_0 and Q8_0 quantizers, writing blocks as a GGUF file holds them, for tests to compare against.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace llamacl::test {

// ggml_compute_fp32_to_fp16: the FP16 library's conversion, rounding to nearest even through float adds.
inline std::uint16_t ggml_fp32_to_fp16(float f) {
    const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
    float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
    const auto w = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t shl1_w = w + w;
    const std::uint32_t sign = w & 0x80000000u;
    std::uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
    const auto bits = std::bit_cast<std::uint32_t>(base);
    const std::uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const std::uint32_t mantissa_bits = bits & 0x00000FFFu;
    const std::uint32_t nonsign = exp_bits + mantissa_bits;
    return static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline void put_half(std::vector<std::byte>& out, std::uint16_t h) {
    out.push_back(static_cast<std::byte>(h & 0xFF));
    out.push_back(static_cast<std::byte>(h >> 8));
}

// quantize_row_q4_0_ref.
inline std::vector<std::byte> ggml_q4_0(const std::vector<float>& x) {
    std::vector<std::byte> out;
    for (std::size_t i = 0; i < x.size() / 32; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            if (amax < std::fabs(v)) {
                amax = std::fabs(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        put_half(out, ggml_fp32_to_fp16(d));
        for (int j = 0; j < 16; ++j) {
            const float x0 = x[i * 32 + j] * id;
            const float x1 = x[i * 32 + 16 + j] * id;
            const std::uint8_t xi0 = std::min<std::int8_t>(15, static_cast<std::int8_t>(x0 + 8.5f));
            const std::uint8_t xi1 = std::min<std::int8_t>(15, static_cast<std::int8_t>(x1 + 8.5f));
            out.push_back(static_cast<std::byte>(xi0 | xi1 << 4));
        }
    }
    return out;
}

// quantize_row_q8_0_ref.
inline std::vector<std::byte> ggml_q8_0(const std::vector<float>& x) {
    std::vector<std::byte> out;
    for (std::size_t i = 0; i < x.size() / 32; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[i * 32 + j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        put_half(out, ggml_fp32_to_fp16(d));
        for (int j = 0; j < 32; ++j)
            out.push_back(static_cast<std::byte>(static_cast<std::int8_t>(std::roundf(x[i * 32 + j] * id))));
    }
    return out;
}

}  // namespace llamacl::test
