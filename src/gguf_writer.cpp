#include "llamacl/gguf_writer.hpp"

#include <cstring>

namespace llamacl {

namespace {

constexpr std::uint32_t kVersion = 3;

// Numbers as the file stores them: little-endian, as the host (x86, ARM) holds them.
template <class T>
void append(std::vector<std::byte>& out, T value) {
    const std::size_t at = out.size();
    out.resize(at + sizeof value);
    std::memcpy(out.data() + at, &value, sizeof value);
}

void append_bytes(std::vector<std::byte>& out, const void* data, std::uint64_t bytes) {
    const std::size_t at = out.size();
    out.resize(at + bytes);
    if (bytes > 0) std::memcpy(out.data() + at, data, bytes);
}

// A GGUF string: u64 length, then the bytes.
void append_string(std::vector<std::byte>& out, std::string_view text) {
    append<std::uint64_t>(out, text.size());
    append_bytes(out, text.data(), text.size());
}

// What follows an array's type: its elements' type and count.
void append_array_head(std::vector<std::byte>& out, GgufType element, std::uint64_t count) {
    append(out, static_cast<std::uint32_t>(element));
    append(out, count);
}

}  // namespace

GgufWriter::GgufWriter(std::uint32_t alignment) : alignment_(alignment) {
    add_u32("general.alignment", alignment);
}

void GgufWriter::key(std::string_view key, GgufType type) {
    append_string(metadata_, key);
    append(metadata_, static_cast<std::uint32_t>(type));
    ++n_kv_;
}

void GgufWriter::add_u32(std::string_view k, std::uint32_t value) {
    key(k, GgufType::u32);
    append(metadata_, value);
}

void GgufWriter::add_f32(std::string_view k, float value) {
    key(k, GgufType::f32);
    append(metadata_, value);
}

void GgufWriter::add_string(std::string_view k, std::string_view value) {
    key(k, GgufType::string);
    append_string(metadata_, value);
}

void GgufWriter::add_strings(std::string_view k, std::span<const std::string> values) {
    key(k, GgufType::array);
    append_array_head(metadata_, GgufType::string, values.size());
    for (const std::string& value : values) append_string(metadata_, value);
}

void GgufWriter::add_f32s(std::string_view k, std::span<const float> values) {
    key(k, GgufType::array);
    append_array_head(metadata_, GgufType::f32, values.size());
    append_bytes(metadata_, values.data(), values.size_bytes());
}

void GgufWriter::add_i32s(std::string_view k, std::span<const std::int32_t> values) {
    key(k, GgufType::array);
    append_array_head(metadata_, GgufType::i32, values.size());
    append_bytes(metadata_, values.data(), values.size_bytes());
}

void GgufWriter::add_value(std::string_view k, const GgufValue& value) {
    key(k, value.type);
    // A string's bytes follow its length; an array's payload (every element as stored, strings with their
    // lengths) follows its element type and count; a scalar is its bytes.
    if (value.type == GgufType::string) {
        append<std::uint64_t>(metadata_, value.bytes);
    } else if (value.type == GgufType::array) {
        append_array_head(metadata_, value.element_type, value.count);
    }
    append_bytes(metadata_, value.data, value.bytes);
}

std::uint64_t GgufWriter::add_tensor(std::string_view name, const std::vector<std::uint64_t>& dims, GgmlType type) {
    std::uint64_t elements = 1;
    for (const std::uint64_t d : dims) elements *= d;
    const std::uint64_t bytes = ggml_bytes(*ggml_type_info(static_cast<std::uint32_t>(type)), elements);
    append_string(directory_, name);
    append(directory_, static_cast<std::uint32_t>(dims.size()));
    for (const std::uint64_t d : dims) append(directory_, d);
    append(directory_, static_cast<std::uint32_t>(type));
    append(directory_, data_bytes_);
    data_bytes_ += bytes + padding(bytes);
    ++n_tensors_;
    return bytes;
}

std::uint64_t GgufWriter::padding(std::uint64_t bytes) const { return (alignment_ - bytes % alignment_) % alignment_; }

std::vector<std::byte> GgufWriter::head() const {
    std::vector<std::byte> out;
    append_bytes(out, "GGUF", 4);
    append(out, kVersion);
    append(out, n_tensors_);
    append(out, n_kv_);
    append_bytes(out, metadata_.data(), metadata_.size());
    append_bytes(out, directory_.data(), directory_.size());
    out.resize(out.size() + padding(out.size()));
    return out;
}

}  // namespace llamacl
