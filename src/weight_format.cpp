#include "llamacl/weight_format.hpp"

#include <algorithm>
#include <cstring>

namespace llamacl {

const char* element_name(ElementType type) {
    switch (type) {
        case ElementType::f32: return "f32";
        case ElementType::f16: return "f16";
        case ElementType::q8_0: return "q8_0";
        case ElementType::q4_0: return "q4_0";
    }
    return "?";
}

std::optional<ElementType> parse_element_type(std::string_view name) {
    for (ElementType t : kElementTypes)
        if (name == element_name(t)) return t;
    return std::nullopt;
}

std::uint64_t WeightFormat::bytes(std::uint64_t elements) const {
    switch (type) {
        case ElementType::f32: return elements * sizeof(float);
        case ElementType::f16: return elements * sizeof(std::uint16_t);
        case ElementType::q8_0: return elements + elements / static_cast<std::uint64_t>(group_size) * sizeof(float);
        case ElementType::q4_0: return elements / kQ4BlockSize * sizeof(Q4Block);
    }
    return 0;
}

int WeightFormat::value_bits() const {
    switch (type) {
        case ElementType::f32: return 32;
        case ElementType::f16: return 16;
        case ElementType::q8_0: return 8;
        case ElementType::q4_0: return 4;
    }
    return 0;
}

std::string WeightFormat::describe() const {
    if (!quantized()) return element_name(type);
    return std::string(element_name(type)) + (rule == QuantRule::ggml ? " (ggml's blocks of " : " (group size ") +
           std::to_string(group_size) + ")";
}

WeightTensor WeightTensor::from(std::uint64_t first) const {
    WeightTensor t = *this;
    t.row_blocks = nullptr;  // (a view's rows need not start a block)
    switch (format.type) {
        case ElementType::f32: t.values = f32() + first; break;
        case ElementType::f16: t.values = f16() + first; break;
        case ElementType::q8_0:
            t.values = q8() + first;
            t.scales = scales + first / static_cast<std::uint64_t>(format.group_size);
            break;
        case ElementType::q4_0: t.values = q4() + first / kQ4BlockSize; break;
    }
    return t;
}

WeightTensor WeightTensor::encoded(const WeightFormat& format, const std::byte* data, std::uint64_t elements) {
    WeightTensor t{format, data};
    if (format.type == ElementType::q8_0) t.scales = reinterpret_cast<const float*>(data + elements);
    return t;
}

DeviceWeightLayout DeviceWeightLayout::for_family(const WeightFormat& format, bool gpu) {
    if (!gpu) return {format, 1, 4};
    const int g = format.group_size;
    return {format, 32, g % 16 == 0 ? 16 : g % 8 == 0 ? 8 : 4};
}

std::string DeviceWeightLayout::build_options() const {
    switch (format.type) {
        case ElementType::f32: return " -DWEIGHT_F32";
        case ElementType::f16: return " -DWEIGHT_F16";
        case ElementType::q8_0:
            return " -DWEIGHT_Q8_0 -DGROUP_SIZE=" + std::to_string(format.group_size) +
                   " -DQ8_INTERLEAVE=" + std::to_string(interleave) + " -DQ8_WORD=" + std::to_string(word) +
                   (format.rule == QuantRule::ggml ? " -DQ8_GGML" : "");
        case ElementType::q4_0: return " -DWEIGHT_Q4_0 -DGROUP_SIZE=32 -DQ8_GGML";
    }
    return "";
}

void DeviceWeightLayout::write_rows(std::byte* out, const WeightTensor& source, std::uint64_t first,
                                    std::uint64_t rows, std::uint64_t n) const {
    if (format.type == ElementType::q4_0) {
        const std::uint64_t blocks = n / kQ4BlockSize;
        for (std::uint64_t r = 0; r < rows; ++r, out += format.bytes(n)) {
            const Q4Block* row = source.q4() + (first + r) * blocks;
            for (std::uint64_t b = 0; b < blocks; ++b) {
                std::memcpy(out + sizeof row->qs * b, row[b].qs, sizeof row->qs);
                std::memcpy(out + n / 2 + sizeof row->d * b, &row[b].d, sizeof row->d);
            }
        }
        return;
    }
    if (format.type != ElementType::q8_0) {
        const std::uint64_t row_bytes = format.bytes(n);
        std::memcpy(out, static_cast<const std::byte*>(source.values) + first * row_bytes, rows * row_bytes);
        return;
    }
    // kernels/weights.cl's q8_word: word k of group g of a row of `groups` groups.
    const std::uint64_t gs = static_cast<std::uint64_t>(format.group_size), groups = n / gs;
    const std::uint64_t bytes = static_cast<std::uint64_t>(word), words = gs / bytes;
    const std::uint64_t run_length = static_cast<std::uint64_t>(interleave);
    for (std::uint64_t r = first; r < first + rows; ++r) {
        const std::int8_t* values = source.q8() + r * n;
        for (std::uint64_t g = 0; g < groups; ++g) {
            const std::uint64_t run = g / run_length * run_length, span = std::min(run_length, groups - run);
            for (std::uint64_t k = 0; k < words; ++k)
                std::memcpy(out + bytes * (run * words + k * span + (g - run)), values + g * gs + bytes * k, bytes);
        }
        std::memcpy(out + n, source.scales + r * groups, groups * sizeof(float));
        out += n + groups * sizeof(float);
    }
}

}  // namespace llamacl
