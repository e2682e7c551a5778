#pragma once
// Writing GGUF version 3 files (the layout gguf_file.hpp reads): metadata and a tensor directory, then
// each tensor's data at the next multiple of the alignment, zeros between. Everything before the data is
// known once the tensors are declared, so the data can be streamed tensor by tensor after head().
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llamacl/ggml_types.hpp"
#include "llamacl/gguf_file.hpp"

namespace llamacl {

class GgufWriter {
public:
    // Writes general.alignment (a power of two) as the first key.
    explicit GgufWriter(std::uint32_t alignment = 32);

    // Metadata, in the order added; each key is added once.
    void add_u32(std::string_view key, std::uint32_t value);
    void add_f32(std::string_view key, float value);
    void add_string(std::string_view key, std::string_view value);
    void add_strings(std::string_view key, std::span<const std::string> values);
    void add_f32s(std::string_view key, std::span<const float> values);
    void add_i32s(std::string_view key, std::span<const std::int32_t> values);
    // A value read from another file, copied as it is stored there.
    void add_value(std::string_view key, const GgufValue& value);

    // Declares the next tensor: `dims` innermost first, the row length a whole number of `type`'s blocks.
    // Returns the bytes of its data.
    std::uint64_t add_tensor(std::string_view name, const std::vector<std::uint64_t>& dims, GgmlType type);

    // The file up to the first tensor's data: header, metadata, directory and the padding after them.
    std::vector<std::byte> head() const;
    // The zeros that follow a tensor's `bytes` of data: to the next multiple of the alignment.
    std::uint64_t padding(std::uint64_t bytes) const;

private:
    void key(std::string_view key, GgufType type);

    std::uint64_t alignment_;
    std::uint64_t n_kv_ = 0, n_tensors_ = 0;
    std::vector<std::byte> metadata_, directory_;
    std::uint64_t data_bytes_ = 0;  // the data section so far, each tensor padded
};

}  // namespace llamacl
