#pragma once
// How a weight matrix is stored: its element type (fp32, IEEE half, llama2.c's Q8_0: int8 values in
// groups that share one fp32 scale, or ggml's Q4_0: 4-bit values in blocks of 32 with a half scale),
// views of a tensor in that format, and how its rows lie in device memory. Norm weights are always fp32. The device's kernels are built for a layout (build_options():
// WEIGHT_* in kernels/weights.cl, whose loads every row product reads its weights through) rather than
// copied per format.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llamacl {

enum class ElementType { f32, f16, q8_0, q4_0 };
// Every element type, in the order --weights lists them and `llama-cl check` climbs them.
inline constexpr ElementType kElementTypes[] = {ElementType::f32, ElementType::f16, ElementType::q8_0,
                                                ElementType::q4_0};
const char* element_name(ElementType type);  // "f32", "f16", "q8_0", "q4_0": the spelling of --weights
std::optional<ElementType> parse_element_type(std::string_view name);
// Whether weights of `type` are integers in groups that share a scale, whose matmuls quantize their input
// to int8 groups (q8_0, q4_0).
constexpr bool quantized(ElementType type) { return type == ElementType::q8_0 || type == ElementType::q4_0; }

// Whose arithmetic a quantized format follows, which the file decides: llama2.c files runq.c's (each
// matmul's input quantized with an fp32 scale, q = round(x / scale); a group adds ival * w_scale *
// x_scale), GGUF files ggml's reference kernels (quantize_row_q8_0_ref: blocks of 32, d = max|x| / 127
// kept as a half, q = roundf(x * (1 / d)); vec_dot_q8_0_q8_0: a block adds sumi * (d_w * d_x)).
enum class QuantRule { runq, ggml };

// ggml's Q4_0 block: 32 consecutive weights of a row, w = (q - 8) x d; byte j of qs holds element j in its
// low nibble and element j + 16 in its high nibble. Always under QuantRule::ggml: the activations are
// quantized to Q8_0 blocks of 32 and a block adds sumi * (d_w * d_x).
struct Q4Block {
    std::uint16_t d;  // the scale, an IEEE half
    std::uint8_t qs[16];
};
static_assert(sizeof(Q4Block) == 18, "ggml's block_q4_0");
inline constexpr int kQ4BlockSize = 32;

struct WeightFormat {
    ElementType type = ElementType::f32;
    // q8_0: consecutive elements (in row-major order) sharing a scale; q4_0: 32; 0 otherwise
    int group_size = 0;
    QuantRule rule = QuantRule::runq;  // q8_0: whose arithmetic (the scales are fp32 in memory for both); q4_0: ggml

    static WeightFormat q4_0() { return {ElementType::q4_0, kQ4BlockSize, QuantRule::ggml}; }
    bool quantized() const { return llamacl::quantized(type); }
    // The bits a weight's value takes, its group's scale apart: 32, 16, 8 or 4.
    int value_bits() const;
    // Whether the device's kernels read this format's groups, whole 4-byte words of int8 values
    // (weights.cl); true for the float formats, which have none.
    bool device_reads_groups() const { return !quantized() || (group_size > 0 && group_size % 4 == 0); }
    // The format a matmul's input takes: q8_0 in the weights' groups under their rule for Q4_0, the
    // weights' own otherwise.
    WeightFormat input() const { return type == ElementType::q4_0 ? WeightFormat{ElementType::q8_0, group_size, rule} : *this; }
    // What `elements` weights of this format occupy: values, and for q8_0 the scales after them; for q4_0
    // ggml's blocks.
    std::uint64_t bytes(std::uint64_t elements) const;
    // "f32", "f16", "q8_0 (group size 64)", "q8_0 (ggml's blocks of 32)" or "q4_0 (ggml's blocks of 32)"
    std::string describe() const;
    bool operator==(const WeightFormat&) const = default;
};

// The element types the device's kernels read (DeviceWeightLayout::build_options()): every one.
inline constexpr const auto& kDeviceElementTypes = kElementTypes;

// A weight tensor (or rows of one) in memory, elements in row-major order.
struct WeightTensor {
    WeightFormat format;
    const void* values = nullptr;   // float, std::uint16_t (half bits) or std::int8_t elements, or Q4Blocks
    const float* scales = nullptr;  // q8_0: one per group of format.group_size elements
    // f32: the same matrix laid out for the CPU reference's row blocks (model_math.hpp's
    // lay_out_row_blocks), where the reference made one; null otherwise.
    const float* row_blocks = nullptr;

    const float* f32() const { return static_cast<const float*>(values); }
    const std::uint16_t* f16() const { return static_cast<const std::uint16_t*>(values); }
    const std::int8_t* q8() const { return static_cast<const std::int8_t*>(values); }
    const Q4Block* q4() const { return static_cast<const Q4Block*>(values); }
    // The tensor from element `first` on (for q8_0 and q4_0 a multiple of the group size), e.g. a block of rows.
    WeightTensor from(std::uint64_t first) const;
    // `elements` weights of `format` as encode_weights (export.hpp) writes them at `data`: for q8_0 the
    // values, then their scales.
    static WeightTensor encoded(const WeightFormat& format, const std::byte* data, std::uint64_t elements);
};

// How a matrix of `format` lies in device memory, as the kernels built for it read it: f32 and f16 as in
// the file; Q8_0 row by row, each row its values (the `word`-byte words of its groups interleaved
// `interleave` groups at a time: kernels/weights.cl) and then its scales; Q4_0 row by row, each row its
// blocks' 16 bytes of nibbles, then their half scales. The same bytes as the file's, in another order, so
// a tensor takes format.bytes(elements) on the device too.
struct DeviceWeightLayout {
    WeightFormat format;
    int interleave = 1;  // Q8_0: groups whose words are interleaved
    int word = 4;        // Q8_0: the bytes of a group a lane loads at once (4, 8 or 16, dividing the group)

    // Float formats: consecutive weights one load of a lane of a GPU shape's per-op matrix kernels brings
    // (kernels/weights.cl's WEIGHT_SPAN: a float, or two halves; the token kernel's too where its rows are
    // whole spans and PTX widens halves, else one weight), so such a row of n weights is about n / span()
    // loads.
    int span() const { return format.type == ElementType::f16 ? 2 : 1; }

    // The layout of the quantized inputs (the prompt's rows, the staged input) that kernels built for this
    // one read: Q8_0's own; for Q4_0, q8_0 rows of its blocks of 32, in 16-byte words (kernels/weights.cl).
    DeviceWeightLayout input() const {
        return format.type == ElementType::q4_0 ? DeviceWeightLayout{format.input(), 1, 16} : *this;
    }
    // The layout the kernels of a shape family read `format` in: the GPU family's (`gpu`) interleaves the
    // words of a warp's 32 groups, each word the widest load (16 bytes, four ints) the group size allows,
    // so that a lane moves as many bytes per instruction as it can; the CPU families' reads rows as stored,
    // four bytes a word.
    static DeviceWeightLayout for_family(const WeightFormat& format, bool gpu);
    // The -D options that select the kernels' weight loads for this layout.
    std::string build_options() const;
    // Writes rows [first, first + rows) of `source`, a matrix of rows of n weights, in this layout at `out`
    // (format.bytes(rows * n) bytes).
    void write_rows(std::byte* out, const WeightTensor& source, std::uint64_t first, std::uint64_t rows,
                    std::uint64_t n) const;
};

}  // namespace llamacl
