#pragma once
// GGUF (llama.cpp's file format), versions 2 and 3: the container only — its metadata (typed key/value
// pairs) and its tensor directory — memory-mapped and validated before any of it is used. What a key or a
// tensor means to a Llama model is gguf_model's concern; this module knows none of the names.
//
// Layout (little-endian): "GGUF", uint32 version, uint64 tensor count, uint64 metadata count; then the
// metadata (string key, uint32 type, value), then per tensor its name, uint32 dimension count, that many
// uint64 dimensions (innermost first), uint32 ggml type and uint64 offset; then padding to
// general.alignment (default 32) and the data section the offsets count from.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace llamacl {

// GGUF's metadata value types (their numbers in the file).
enum class GgufType : std::uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
    u64 = 10, i64 = 11, f64 = 12,
};
const char* gguf_type_name(GgufType type);  // "u32", "string", "array", ...

// One metadata value, pointing into the mapping. An array's elements are of one type (not arrays of
// arrays); strings are byte strings as stored (validated to lie inside the file, not as UTF-8).
struct GgufValue {
    GgufType type = GgufType::u8;
    GgufType element_type = GgufType::u8;  // arrays: the elements' type
    std::uint64_t count = 0;               // arrays: the element count
    const std::byte* data = nullptr;       // the scalar, the string's bytes, or an array's first element
    std::uint64_t bytes = 0;               // the scalar's or string's bytes; an array's whole payload
    // Arrays of strings: element i's length prefix is at data + string_offsets[i] (held by the file).
    const std::uint64_t* string_offsets = nullptr;

    // The value as an integer, where it is one of the integer types (not bool: boolean() reads that);
    // nullopt otherwise, or when it does not fit an int64 (a u64 above INT64_MAX).
    std::optional<std::int64_t> integer() const;
    std::optional<double> number() const;  // f32, f64 or an integer type
    std::optional<std::string_view> string() const;
    // An array of strings: its element i (i < count; std::out_of_range otherwise). Each is validated at open.
    std::string_view string_at(std::uint64_t i) const;
};

// A tensor as the directory describes it. ggml's type numbers (ggml_type): what each is, is
// ggml_types.hpp's table; the directory only checks that the type is one that table knows the size of.
struct GgufTensor {
    std::string name;
    std::vector<std::uint64_t> dims;  // innermost (row length) first, as ggml's ne[]
    std::uint32_t type = 0;           // ggml_type
    std::uint64_t offset = 0;         // from the start of the data section
    std::uint64_t bytes = 0;          // rows x the type's row bytes
    const std::byte* data = nullptr;  // in the mapping

    std::uint64_t elements() const;
    std::uint64_t rows() const;  // elements / dims[0]
};

class GgufFile {
public:
    // Whether `head` (the file's first bytes) starts with GGUF's magic.
    static bool has_magic(std::span<const std::byte> head);
    // Memory-maps and validates `path`. Throws llamacl::Error("<path>: ...") naming the key or tensor for:
    // a missing or unreadable file, bad magic, a version other than 2 or 3, any count, string or array
    // length that would run past the end of the file (checked before allocating for it), an unknown value
    // or tensor type, duplicate keys or tensor names, a dimension count outside 1..4, a zero or overflowing
    // dimension, a row length that is not a whole number of the type's blocks, a general.alignment that is
    // not a power of two (or not a u32), an offset not a multiple of the alignment, a tensor outside the
    // data section, and tensors that overlap. Never reads past the file.
    static GgufFile open(const std::string& path);
    // The same checks on an image in memory (tests, the fuzz target); `name` stands for the path in messages.
    static GgufFile parse(std::shared_ptr<const std::vector<std::byte>> image, const std::string& name);

    const std::string& path() const { return path_; }
    std::uint32_t version() const { return version_; }
    std::uint64_t alignment() const { return alignment_; }

    // The value of `key`, or null when absent.
    const GgufValue* find(std::string_view key) const;
    // Typed look-ups: nullopt when the key is absent; an Error naming the key and both types when it is
    // present with the wrong type (any integer type is accepted for an integer, as llama.cpp does for the
    // counts), or an integer that does not fit.
    std::optional<std::int64_t> integer(std::string_view key) const;
    std::optional<double> number(std::string_view key) const;
    std::optional<std::string_view> string(std::string_view key) const;
    std::optional<bool> boolean(std::string_view key) const;
    // An array of `element` type (nullopt when absent; an Error for another type).
    const GgufValue* array(std::string_view key, GgufType element) const;

    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* tensor(std::string_view name) const;  // null when absent

private:
    struct Storage;
    GgufFile() = default;
    void parse_image(const std::byte* data, std::uint64_t size);

    std::shared_ptr<Storage> storage_;  // keeps the mapping (or the image) alive for every view
    std::string path_;
    // Keys and tensor names (views into the image) to their index in metadata_ and tensors_.
    std::unordered_map<std::string_view, std::size_t> key_index_;
    std::unordered_map<std::string_view, std::size_t> tensor_index_;
    std::uint32_t version_ = 0;
    std::uint64_t alignment_ = 32;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::vector<GgufTensor> tensors_;
};

}  // namespace llamacl
