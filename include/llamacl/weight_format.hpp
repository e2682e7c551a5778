#pragma once
// The format of a matrix's weights on the device: its element type and, for block formats, how many
// elements share one scale. The kernels are built for a format (build_option(): WEIGHT_* in
// kernels/weights.cl, whose loads every row product reads its weights through) rather than copied per
// format. Only f32 is implemented; f16 and q8_0 (runq.c's groups of int8 with one float scale) are the
// formats it is shaped for.
#include <stdexcept>
#include <string>

namespace llamacl {

enum class ElementType { f32, f16, q8_0 };

struct WeightFormat {
    ElementType type = ElementType::f32;
    int group_size = 0;  // elements sharing one scale (q8_0); 0 where each element stands alone

    // The -D that selects the kernels' weight loads for this format.
    std::string build_option() const {
        if (type != ElementType::f32) throw std::logic_error("weight format not implemented: only f32 is");
        return " -DWEIGHT_F32";
    }
};

}  // namespace llamacl
