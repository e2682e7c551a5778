#include "llamacl/gguf_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "llamacl/error.hpp"
#include "llamacl/ggml_types.hpp"
#include "llamacl/mapped_file.hpp"

namespace llamacl {

static_assert(std::endian::native == std::endian::little, "GGUF values are read in place as little-endian");

struct GgufFile::Storage {
    std::optional<MappedFile> file;
    std::shared_ptr<const std::vector<std::byte>> image;
    // Arrays of strings: each element's offset from the array's first byte (GgufValue::string_offsets).
    std::vector<std::vector<std::uint64_t>> string_offsets;
};

namespace {

constexpr std::uint32_t kLastType = static_cast<std::uint32_t>(GgufType::f64);
// The fewest bytes a metadata entry (empty key, type, a u8) and a tensor's entry (empty name, one
// dimension, type, offset) take: counts are checked against these before anything is sized by them.
constexpr std::uint64_t kMinEntryBytes = 8 + 4 + 1;
constexpr std::uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;
constexpr std::uint64_t kDefaultAlignment = 32;

// Room reserved ahead for `count` entries (already checked against the bytes left): a corrupt count in a
// large file reserves no more than this; beyond it, memory grows with the entries actually read.
std::size_t reservation(std::uint64_t count) { return static_cast<std::size_t>(std::min<std::uint64_t>(count, 1 << 16)); }

template <class T>
T load(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Bytes of one value of a fixed-size type; 0 for string, array and unknown numbers.
std::uint64_t scalar_bytes(std::uint32_t type) {
    switch (static_cast<GgufType>(type)) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    default: return 0;
    }
}

bool is_integer(GgufType t) {
    return scalar_bytes(static_cast<std::uint32_t>(t)) > 0 && t != GgufType::boolean && t != GgufType::f32 &&
           t != GgufType::f64;
}

std::string type_text(const GgufValue& v) {
    return v.type == GgufType::array ? std::string("array of ") + gguf_type_name(v.element_type)
                                     : gguf_type_name(v.type);
}

// A key or tensor name for a message: quoted, control characters escaped, long names cut.
std::string shown(std::string_view name) {
    constexpr std::size_t kMax = 120;
    std::string s(1, '\'');
    s += printable(name.substr(0, kMax));
    s += name.size() > kMax ? "...'" : "'";
    return s;
}

std::string dims_text(const std::vector<std::uint64_t>& dims) {
    std::string s = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

// Reads the image front to back; every read is checked against the bytes left first.
class Reader {
public:
    Reader(const std::byte* base, std::uint64_t size, const std::string& path) : base_(base), size_(size), path_(path) {}

    // Every message says the file was read as GGUF (a user may not know that it is one).
    [[noreturn]] void fail(const std::string& what) const {
        throw Error(path_ + ": " + (what.find("GGUF") == std::string::npos ? "not a valid GGUF file: " : "") + what);
    }
    std::uint64_t pos() const { return pos_; }
    std::uint64_t left() const { return size_ - pos_; }

    // `what()` names the field for the message.
    template <class What>
    const std::byte* take(std::uint64_t n, const What& what) {
        if (n > left())
            fail("truncated: " + what() + " runs past the end of the file (" + std::to_string(n) + " bytes at offset " +
                 std::to_string(pos_) + ", " + std::to_string(left()) + " left); the file is incomplete, fetch it again");
        const std::byte* p = base_ + pos_;
        pos_ += n;
        return p;
    }
    template <class What>
    std::uint32_t u32(const What& what) { return load<std::uint32_t>(take(4, what)); }
    template <class What>
    std::uint64_t u64(const What& what) { return load<std::uint64_t>(take(8, what)); }
    // A string: its u64 length, then that many bytes.
    template <class What>
    std::string_view string(const What& what) {
        const std::uint64_t n = u64(what);
        const std::byte* p = take(n, what);
        return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(n)};
    }

private:
    const std::byte* base_;
    std::uint64_t size_;
    std::uint64_t pos_ = 0;
    const std::string& path_;
};

}  // namespace

const char* gguf_type_name(GgufType type) {
    switch (type) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
    }
    return "unknown";
}

std::optional<std::int64_t> GgufValue::integer() const {
    switch (type) {
    case GgufType::u8: return load<std::uint8_t>(data);
    case GgufType::i8: return load<std::int8_t>(data);
    case GgufType::u16: return load<std::uint16_t>(data);
    case GgufType::i16: return load<std::int16_t>(data);
    case GgufType::u32: return load<std::uint32_t>(data);
    case GgufType::i32: return load<std::int32_t>(data);
    case GgufType::i64: return load<std::int64_t>(data);
    case GgufType::u64: {
        const auto v = load<std::uint64_t>(data);
        if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
        return static_cast<std::int64_t>(v);
    }
    default: return std::nullopt;
    }
}

std::optional<double> GgufValue::number() const {
    if (type == GgufType::f32) return load<float>(data);
    if (type == GgufType::f64) return load<double>(data);
    if (type == GgufType::u64) return static_cast<double>(load<std::uint64_t>(data));
    if (const auto i = integer()) return static_cast<double>(*i);
    return std::nullopt;
}

std::optional<std::string_view> GgufValue::string() const {
    if (type != GgufType::string) return std::nullopt;
    return std::string_view(reinterpret_cast<const char*>(data), static_cast<std::size_t>(bytes));
}

std::string_view GgufValue::string_at(std::uint64_t i) const {
    if (type != GgufType::array || element_type != GgufType::string || i >= count)
        throw std::out_of_range("GgufValue::string_at: not an array of strings, or index past its end");
    const std::byte* p = data + string_offsets[i];
    return {reinterpret_cast<const char*>(p + 8), static_cast<std::size_t>(load<std::uint64_t>(p))};
}

std::uint64_t GgufTensor::elements() const {
    std::uint64_t n = 1;
    for (const std::uint64_t d : dims) n *= d;
    return n;
}

std::uint64_t GgufTensor::rows() const { return dims.empty() ? 0 : elements() / dims[0]; }

bool GgufFile::has_magic(std::span<const std::byte> head) {
    return head.size() >= 4 && std::memcmp(head.data(), "GGUF", 4) == 0;
}

GgufFile GgufFile::open(const std::string& path) {
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; it changes nothing for regular files.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(path + ": cannot open GGUF file: " + std::strerror(errno));
    auto storage = std::make_shared<Storage>();
    try {
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            throw Error(path + ": not a regular file; pass a GGUF model file (.gguf)");
        // /proc and /sys files call themselves regular with a size of 0 and still have content to read.
        char byte = 0;
        if (st.st_size == 0 && ::read(fd, &byte, 1) == 1)
            throw Error(path + ": a file that reports no size (a /proc or /sys file?), not a GGUF file; pass a .gguf file");
        storage->file.emplace(fd, static_cast<std::size_t>(st.st_size), path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);  // the mapping keeps the file alive

    GgufFile f;
    f.storage_ = std::move(storage);
    f.path_ = path;
    f.parse_image(f.storage_->file->data(), f.storage_->file->size());
    return f;
}

GgufFile GgufFile::parse(std::shared_ptr<const std::vector<std::byte>> image, const std::string& name) {
    GgufFile f;
    f.storage_ = std::make_shared<Storage>();
    f.storage_->image = std::move(image);
    f.path_ = name;
    const auto& img = f.storage_->image;
    f.parse_image(img ? img->data() : nullptr, img ? img->size() : 0);
    return f;
}

void GgufFile::parse_image(const std::byte* data, std::uint64_t size) {
    Reader r(data, size, path_);
    if (size < 4) r.fail("not a GGUF file: " + std::to_string(size) + " bytes, too short for its magic");
    if (!has_magic({data, 4})) r.fail("not a GGUF file: it does not start with \"GGUF\"");
    r.take(4, [] { return std::string("the magic"); });

    // Version 1 stored 32-bit counts; 2 and 3 share one layout (3 added big-endian files, refused here).
    version_ = r.u32([] { return std::string("the version"); });
    if (version_ == 1)
        r.fail("GGUF version 1 is not supported (only versions 2 and 3); convert the model again with a current llama.cpp");
    if (version_ != 2 && version_ != 3) {
        const std::uint32_t swapped = __builtin_bswap32(version_);
        if (swapped == 2 || swapped == 3) r.fail("a big-endian GGUF file; only little-endian GGUF files are read");
        r.fail("GGUF version " + std::to_string(version_) + " is not supported (only versions 2 and 3)");
    }
    const std::uint64_t n_tensors = r.u64([] { return std::string("the tensor count"); });
    const std::uint64_t n_kv = r.u64([] { return std::string("the metadata count"); });

    // Metadata.
    if (n_kv > r.left() / kMinEntryBytes)
        r.fail("truncated or corrupt: " + std::to_string(n_kv) + " metadata entries cannot fit in the " + std::to_string(r.left()) +
               " bytes left after the header");
    metadata_.reserve(reservation(n_kv));
    key_index_.reserve(reservation(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
        const std::string_view key = r.string([&] {
            return "the key of metadata entry " + std::to_string(i) + " (of " + std::to_string(n_kv) + ")";
        });
        if (!key_index_.emplace(key, metadata_.size()).second) r.fail("duplicate metadata key " + shown(key));
        const auto value_of = [&] { return "the value of key " + shown(key); };

        GgufValue v;
        const std::uint32_t type = r.u32(value_of);
        if (type > kLastType) r.fail("key " + shown(key) + " has unknown value type " + std::to_string(type));
        v.type = static_cast<GgufType>(type);
        if (v.type == GgufType::string) {
            v.bytes = r.u64(value_of);
            v.data = r.take(v.bytes, value_of);
        } else if (v.type == GgufType::array) {
            const std::uint32_t element = r.u32(value_of);
            if (element == static_cast<std::uint32_t>(GgufType::array))
                r.fail("key " + shown(key) + " is an array of arrays, which GGUF readers do not accept");
            if (element > kLastType)
                r.fail("key " + shown(key) + " is an array of unknown value type " + std::to_string(element));
            v.element_type = static_cast<GgufType>(element);
            v.count = r.u64(value_of);
            // Each string is at least its 8-byte length: the count is bounded before the offsets are sized.
            const std::uint64_t least = v.element_type == GgufType::string ? 8 : scalar_bytes(element);
            if (v.count > r.left() / least)
                r.fail("truncated or corrupt: key " + shown(key) + " holds " + std::to_string(v.count) + " elements of " +
                       gguf_type_name(v.element_type) + ", more than the " + std::to_string(r.left()) +
                       " bytes left in the file can hold");
            const std::uint64_t start = r.pos();
            v.data = data + start;
            if (v.element_type == GgufType::string) {
                std::vector<std::uint64_t> offsets;
                offsets.reserve(reservation(v.count));
                for (std::uint64_t e = 0; e < v.count; ++e) {
                    offsets.push_back(r.pos() - start);
                    r.string([&] { return "element " + std::to_string(e) + " of key " + shown(key); });
                }
                storage_->string_offsets.push_back(std::move(offsets));
                v.string_offsets = storage_->string_offsets.back().data();
            } else {
                r.take(v.count * least, value_of);
            }
            v.bytes = r.pos() - start;
        } else {
            v.bytes = scalar_bytes(type);
            v.data = r.take(v.bytes, value_of);
        }
        metadata_.emplace_back(std::string(key), v);
    }

    // general.alignment: a u32 power of two; 32 without it.
    alignment_ = kDefaultAlignment;
    if (const GgufValue* a = find("general.alignment")) {
        if (a->type != GgufType::u32)
            r.fail("general.alignment has type " + type_text(*a) + ", must be a u32 power of two");
        const auto value = load<std::uint32_t>(a->data);
        if (!std::has_single_bit(value))
            r.fail("general.alignment " + std::to_string(value) + " is not a power of two");
        alignment_ = value;
    }

    // The tensor directory.
    if (n_tensors > r.left() / kMinTensorBytes)
        r.fail("truncated or corrupt: " + std::to_string(n_tensors) + " tensor entries cannot fit in the " +
               std::to_string(r.left()) + " bytes left after the metadata");
    tensors_.reserve(reservation(n_tensors));
    tensor_index_.reserve(reservation(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
        const std::string_view name = r.string([&] {
            return "the name of tensor " + std::to_string(i) + " (of " + std::to_string(n_tensors) + ")";
        });
        if (!tensor_index_.emplace(name, tensors_.size()).second) r.fail("duplicate tensor " + shown(name));
        const std::string t_name = "tensor " + shown(name);
        const auto entry_of = [&] { return "the entry of " + t_name; };

        GgufTensor t;
        t.name = std::string(name);
        const std::uint32_t n_dims = r.u32(entry_of);
        if (n_dims < 1 || n_dims > 4)
            r.fail(t_name + " has " + std::to_string(n_dims) + " dimensions; GGUF tensors have 1 to 4");
        for (std::uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(r.u64(entry_of));
        t.type = r.u32(entry_of);
        t.offset = r.u64(entry_of);

        // Elements as ggml counts them (int64), each dimension at least 1.
        std::uint64_t elements = 1;
        for (const std::uint64_t d : t.dims) {
            if (d == 0) r.fail(t_name + " has a zero dimension: " + dims_text(t.dims));
            if (__builtin_mul_overflow(elements, d, &elements) ||
                elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                r.fail(t_name + ": dimensions " + dims_text(t.dims) + " overflow a 64-bit element count");
        }
        const std::optional<GgmlTypeInfo> info = ggml_type_info(t.type);
        if (!info || info->block == 0)
            r.fail(t_name + " has unknown ggml type " + std::to_string(t.type));
        if (t.dims[0] % info->block != 0)
            r.fail(t_name + " (" + info->name + ") has rows of " + std::to_string(t.dims[0]) +
                   " elements, not a whole number of the type's blocks of " + std::to_string(info->block));
        if (__builtin_mul_overflow(elements / info->block, std::uint64_t{info->block_bytes}, &t.bytes))
            r.fail(t_name + ": size overflows: " + dims_text(t.dims) + " of " + info->name);
        if (t.offset % alignment_ != 0)
            r.fail(t_name + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                   std::to_string(alignment_));
        tensors_.push_back(std::move(t));
    }

    // The data section: from the first multiple of the alignment at or after the directory's end.
    const std::uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
    const std::uint64_t data_bytes = data_start <= size ? size - data_start : 0;
    for (GgufTensor& t : tensors_) {
        if (t.offset > data_bytes || t.bytes > data_bytes - t.offset)
            r.fail("truncated: tensor " + shown(t.name) + " (offset " + std::to_string(t.offset) + ", " +
                   std::to_string(t.bytes) + " bytes) runs past the end of the data section (" +
                   std::to_string(data_bytes) + " bytes); the file is incomplete, fetch it again");
        t.data = data + data_start + t.offset;
    }
    std::vector<std::size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (std::size_t k = 1; k < order.size(); ++k) {
        const GgufTensor& a = tensors_[order[k - 1]];
        const GgufTensor& b = tensors_[order[k]];
        if (a.offset + a.bytes > b.offset)
            r.fail("tensors " + shown(a.name) + " and " + shown(b.name) + " overlap (offsets " + std::to_string(a.offset) +
                   " and " + std::to_string(b.offset) + ", " + std::to_string(a.bytes) + " bytes from the first)");
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
    const auto it = key_index_.find(key);
    return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const GgufValue& v, const std::string& want) {
    throw Error(path + ": key " + shown(key) + " has type " + type_text(v) + ", expected " + want);
}

}  // namespace

std::optional<std::int64_t> GgufFile::integer(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!is_integer(v->type)) wrong_type(path_, key, *v, "an integer type");
    const auto i = v->integer();
    if (!i)
        throw Error(path_ + ": key " + shown(key) + " = " + std::to_string(load<std::uint64_t>(v->data)) +
                    " does not fit a signed 64-bit integer");
    return i;
}

std::optional<double> GgufFile::number(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    const auto n = v->number();
    if (!n) wrong_type(path_, key, *v, "a number (f32, f64 or an integer type)");
    return n;
}

std::optional<std::string_view> GgufFile::string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::string) wrong_type(path_, key, *v, "string");
    return v->string();
}

std::optional<bool> GgufFile::boolean(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::boolean) wrong_type(path_, key, *v, "bool");
    return load<std::uint8_t>(v->data) != 0;
}

const GgufValue* GgufFile::array(std::string_view key, GgufType element) const {
    const GgufValue* v = find(key);
    if (!v) return nullptr;
    if (v->type != GgufType::array || v->element_type != element)
        wrong_type(path_, key, *v, std::string("array of ") + gguf_type_name(element));
    return v;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace llamacl
