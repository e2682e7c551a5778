#pragma once
// Writes GGUF images in memory for tests: metadata of every type, tensors with their bytes, laid out as
// llama.cpp lays them out (each tensor's data at the next multiple of the alignment; a file without
// tensors ends at its last value). Broken variants come
// from raw() values, explicit tensor offsets and dimension counts, and patching the built bytes (put()).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llamacl/gguf_file.hpp"

namespace llamacl::test {

using GgufBytes = std::vector<std::byte>;

// Little-endian encodings, to assemble raw values.
template <class T>
GgufBytes le(T value) {
    GgufBytes b(sizeof value);
    std::memcpy(b.data(), &value, sizeof value);
    return b;
}
inline void append(GgufBytes& a, const GgufBytes& b) { a.insert(a.end(), b.begin(), b.end()); }
inline GgufBytes operator+(GgufBytes a, const GgufBytes& b) {
    append(a, b);
    return a;
}
inline GgufBytes bytes_of(std::string_view s) {
    GgufBytes b(s.size());
    if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
    return b;
}
// A GGUF string: u64 length, then the bytes.
inline GgufBytes gguf_string(std::string_view s) { return le<std::uint64_t>(s.size()) + bytes_of(s); }
// Overwrites image[pos .. pos + sizeof value) with `value`.
template <class T>
void put(GgufBytes& image, std::size_t pos, T value) {
    std::memcpy(image.data() + pos, &value, sizeof value);
}

class GgufBuilder {
public:
    struct Tensor {
        std::string name;
        std::vector<std::uint64_t> dims;  // written as given: any count, zeros included
        std::uint32_t type = 0;           // ggml_type
        GgufBytes data;
        std::optional<std::uint64_t> offset;  // default: the next multiple of the alignment
    };

    explicit GgufBuilder(std::uint32_t version = 3) : version_(version) {}

    GgufBuilder& version(std::uint32_t v) { version_ = v; return *this; }

    // A metadata entry with `type` and an already encoded value (anything, for malformed files).
    GgufBuilder& raw(std::string_view key, std::uint32_t type, const GgufBytes& value) {
        metadata_.push_back(gguf_string(key) + le<std::uint32_t>(type) + value);
        return *this;
    }
    GgufBuilder& raw(std::string_view key, GgufType type, const GgufBytes& value) {
        return raw(key, static_cast<std::uint32_t>(type), value);
    }

    GgufBuilder& u8(std::string_view k, std::uint8_t v) { return raw(k, GgufType::u8, le(v)); }
    GgufBuilder& i8(std::string_view k, std::int8_t v) { return raw(k, GgufType::i8, le(v)); }
    GgufBuilder& u16(std::string_view k, std::uint16_t v) { return raw(k, GgufType::u16, le(v)); }
    GgufBuilder& i16(std::string_view k, std::int16_t v) { return raw(k, GgufType::i16, le(v)); }
    GgufBuilder& u32(std::string_view k, std::uint32_t v) { return raw(k, GgufType::u32, le(v)); }
    GgufBuilder& i32(std::string_view k, std::int32_t v) { return raw(k, GgufType::i32, le(v)); }
    GgufBuilder& u64(std::string_view k, std::uint64_t v) { return raw(k, GgufType::u64, le(v)); }
    GgufBuilder& i64(std::string_view k, std::int64_t v) { return raw(k, GgufType::i64, le(v)); }
    GgufBuilder& f32(std::string_view k, float v) { return raw(k, GgufType::f32, le(v)); }
    GgufBuilder& f64(std::string_view k, double v) { return raw(k, GgufType::f64, le(v)); }
    GgufBuilder& boolean(std::string_view k, bool v) { return raw(k, GgufType::boolean, le<std::uint8_t>(v ? 1 : 0)); }
    GgufBuilder& string(std::string_view k, std::string_view v) { return raw(k, GgufType::string, gguf_string(v)); }

    // Arrays: element type, count, elements.
    template <class T>
    GgufBuilder& array(std::string_view k, GgufType element, const std::vector<T>& values) {
        GgufBytes v = le(static_cast<std::uint32_t>(element)) + le<std::uint64_t>(values.size());
        for (const T& x : values) append(v, le(x));
        return raw(k, GgufType::array, v);
    }
    GgufBuilder& strings(std::string_view k, const std::vector<std::string>& values) {
        GgufBytes v = le(static_cast<std::uint32_t>(GgufType::string)) + le<std::uint64_t>(values.size());
        for (const std::string& s : values) append(v, gguf_string(s));
        return raw(k, GgufType::array, v);
    }

    // general.alignment as a u32 (a power of two), and the layout that follows it. A bad value goes in
    // through u32() or raw(), which leave the layout at 32.
    GgufBuilder& alignment(std::uint32_t a) {
        alignment_ = a;
        return u32("general.alignment", a);
    }

    // A tensor with its data (its size is what the test says it is: nothing is checked here).
    GgufBuilder& tensor(std::string name, std::uint32_t type, std::vector<std::uint64_t> dims, GgufBytes data,
                        std::optional<std::uint64_t> offset = std::nullopt) {
        tensors_.push_back({std::move(name), std::move(dims), type, std::move(data), offset});
        return *this;
    }
    // The same with `bytes` bytes of a fixed pattern.
    GgufBuilder& tensor(std::string name, std::uint32_t type, std::vector<std::uint64_t> dims, std::size_t bytes,
                        std::optional<std::uint64_t> offset = std::nullopt) {
        GgufBytes data(bytes);
        for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>(i * 7 + tensors_.size());
        return tensor(std::move(name), type, std::move(dims), std::move(data), offset);
    }
    std::vector<Tensor>& tensors() { return tensors_; }

    // Where the tensor directory ends and the data section begins, in the built image.
    std::size_t directory_end() const { return build_layout().first; }
    std::size_t data_start() const { return align(directory_end()); }

    GgufBytes build() const {
        const std::vector<std::uint64_t> offsets = build_layout().second;
        GgufBytes out = le<std::uint32_t>(0x46554747) + le(version_) + le<std::uint64_t>(tensors_.size()) +
                        le<std::uint64_t>(metadata_.size());
        for (const GgufBytes& m : metadata_) append(out, m);
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            const Tensor& t = tensors_[i];
            append(out, gguf_string(t.name) + le<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size())));
            for (std::uint64_t d : t.dims) append(out, le(d));
            append(out, le(t.type) + le(offsets[i]));
        }
        if (tensors_.empty()) return out;  // as llama.cpp's vocabulary-only files: no padding, no data
        const std::size_t start = align(out.size());
        out.resize(start);
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            const std::size_t at = start + static_cast<std::size_t>(offsets[i]);
            if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size());
            std::copy(tensors_[i].data.begin(), tensors_[i].data.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
        }
        return out;
    }
    std::shared_ptr<const std::vector<std::byte>> image() const {
        return std::make_shared<const std::vector<std::byte>>(build());
    }
    GgufFile parse(const std::string& name = "test.gguf") const { return GgufFile::parse(image(), name); }
    void write(const std::filesystem::path& path) const { write_file(path, build()); }

    static void write_file(const std::filesystem::path& path, const GgufBytes& bytes) {
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }

private:
    std::size_t align(std::size_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

    // The directory's end, and each tensor's offset (given, or packed at the alignment).
    std::pair<std::size_t, std::vector<std::uint64_t>> build_layout() const {
        std::size_t end = 24;
        for (const GgufBytes& m : metadata_) end += m.size();
        std::vector<std::uint64_t> offsets;
        std::uint64_t next = 0;
        for (const Tensor& t : tensors_) {
            end += 8 + t.name.size() + 4 + 8 * t.dims.size() + 4 + 8;
            const std::uint64_t at = t.offset ? *t.offset : next;
            offsets.push_back(at);
            next = align(static_cast<std::size_t>(at + t.data.size()));
        }
        return {end, offsets};
    }

    std::uint32_t version_;
    std::uint32_t alignment_ = 32;
    std::vector<GgufBytes> metadata_;
    std::vector<Tensor> tensors_;
};

}  // namespace llamacl::test
