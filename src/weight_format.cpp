#include "llamacl/weight_format.hpp"

#include <stdexcept>

namespace llamacl {

const char* element_name(ElementType type) {
    switch (type) {
        case ElementType::f32: return "f32";
        case ElementType::f16: return "f16";
        case ElementType::q8_0: return "q8_0";
    }
    return "?";
}

std::optional<ElementType> parse_element_type(std::string_view name) {
    for (ElementType t : {ElementType::f32, ElementType::f16, ElementType::q8_0})
        if (name == element_name(t)) return t;
    return std::nullopt;
}

std::uint64_t WeightFormat::bytes(std::uint64_t elements) const {
    switch (type) {
        case ElementType::f32: return elements * sizeof(float);
        case ElementType::f16: return elements * sizeof(std::uint16_t);
        case ElementType::q8_0: return elements + elements / static_cast<std::uint64_t>(group_size) * sizeof(float);
    }
    return 0;
}

std::string WeightFormat::describe() const {
    return type == ElementType::q8_0 ? "q8_0 (group size " + std::to_string(group_size) + ")" : element_name(type);
}

std::string WeightFormat::build_option() const {
    switch (type) {
        case ElementType::f32: return " -DWEIGHT_F32";
        case ElementType::f16: return " -DWEIGHT_F16";
        case ElementType::q8_0: break;
    }
    throw std::logic_error("the kernels read f32 and f16 weights, not " + describe());
}

WeightTensor WeightTensor::from(std::uint64_t first) const {
    WeightTensor t = *this;
    switch (format.type) {
        case ElementType::f32: t.values = f32() + first; break;
        case ElementType::f16: t.values = f16() + first; break;
        case ElementType::q8_0:
            t.values = q8() + first;
            t.scales = scales + first / static_cast<std::uint64_t>(format.group_size);
            break;
    }
    return t;
}

}  // namespace llamacl
