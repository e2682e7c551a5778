#include "llamacl/weight_format.hpp"

namespace llamacl {

const char* format_name(WeightFormat format) {
    switch (format) {
        case WeightFormat::f32: return "f32";
        case WeightFormat::f16: return "f16";
        case WeightFormat::q8_0: return "q8_0";
    }
    return "?";
}

std::optional<WeightFormat> parse_format(std::string_view name) {
    for (WeightFormat f : {WeightFormat::f32, WeightFormat::f16, WeightFormat::q8_0})
        if (name == format_name(f)) return f;
    return std::nullopt;
}

std::uint64_t WeightType::bytes(std::uint64_t elements) const {
    switch (format) {
        case WeightFormat::f32: return elements * sizeof(float);
        case WeightFormat::f16: return elements * sizeof(std::uint16_t);
        case WeightFormat::q8_0: return elements + elements / static_cast<std::uint64_t>(group_size) * sizeof(float);
    }
    return 0;
}

std::string WeightType::describe() const {
    return format == WeightFormat::q8_0 ? "q8_0 (group size " + std::to_string(group_size) + ")" : format_name(format);
}

WeightTensor WeightTensor::from(std::uint64_t first) const {
    WeightTensor t = *this;
    switch (type.format) {
        case WeightFormat::f32: t.values = f32() + first; break;
        case WeightFormat::f16: t.values = f16() + first; break;
        case WeightFormat::q8_0:
            t.values = q8() + first;
            t.scales = scales + first / static_cast<std::uint64_t>(type.group_size);
            break;
    }
    return t;
}

}  // namespace llamacl
