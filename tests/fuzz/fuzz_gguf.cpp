// libFuzzer target: the GGUF container parser (GgufFile::parse, the same code GgufFile::open runs on a
// mapped file), then, for what it accepts, a read of every byte every view reaches (values, each string of
// a string array, each tensor), every typed accessor on every key, the Llama model loader, and the
// vocabulary (SentencePiece or byte-level BPE) encoding and decoding a few hostile texts. The image is a heap block of exactly
// the input's size, so a view reaching past it is a heap-buffer-overflow under ASan.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/gguf_file.hpp"
#include "llamacl/gguf_model.hpp"
#include "llamacl/tokenizer.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_gguf: %s\n", what);
    std::abort();
}

void check_message(const llamacl::Error& e) {
    if (std::strncmp(e.what(), "fuzz.gguf: ", 11) != 0) fail("an error message that does not name the file");
    if (std::strchr(e.what(), '\n') != nullptr) fail("an error message of more than one line");
}

std::uint32_t touch(const void* p, std::uint64_t bytes) {
    std::uint32_t acc = 0;
    for (std::uint64_t i = 0; i < bytes; ++i) acc = acc * 31 + static_cast<const std::uint8_t*>(p)[i];
    return acc;
}

// An accessor either answers or throws a one-line Error naming the file.
template <class Call>
void try_accessor(const Call& call) {
    try {
        call();
    } catch (const llamacl::Error& e) {
        check_message(e);
    }
}

// A vocabulary the loader accepted encodes and decodes any text, never failing but by a one-line Error.
void exercise_vocabulary(const llamacl::Tokenizer& v) {
    static const std::string_view texts[] = {"Hello world", " \n\n  x", "\xff\xfe\xc3", std::string_view("a\0b", 3),
                                             "<|eot_id|><s>", "1234567 ok'll"};
    llamacl::PieceWriter writer(v.byte_level());
    for (const std::string_view text : texts)
        for (const bool special : {false, true}) {
            std::vector<int> ids;
            try {
                ids = v.encode(text, true, true, special);
            } catch (const llamacl::Error& e) {
                check_message(e);
                continue;
            }
            for (std::size_t i = 0; i < ids.size(); ++i) {
                if (ids[i] < 0 || ids[i] >= v.size()) fail("an id outside the vocabulary");
                writer.push(v.decode(i ? ids[i - 1] : v.bos(), ids[i]), false);
            }
        }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto image = std::make_shared<std::vector<std::byte>>(size);
    if (size > 0) std::memcpy(image->data(), data, size);
    try {
        const llamacl::GgufFile f = llamacl::GgufFile::parse(image, "fuzz.gguf");
        if (f.version() != 2 && f.version() != 3) fail("accepted a version other than 2 and 3");
        if (!std::has_single_bit(f.alignment())) fail("accepted an alignment that is not a power of two");
        volatile std::uint32_t sink = 0;
        for (const auto& entry : f.metadata()) {
            const std::string& key = entry.first;
            const llamacl::GgufValue& v = entry.second;
            if (f.find(key) != &v) fail("find() does not return the key's own value");
            if (v.bytes > size) fail("a value larger than the file");
            sink = sink + touch(v.data, v.bytes);
            if (v.type == llamacl::GgufType::array && v.element_type == llamacl::GgufType::string)
                for (std::uint64_t i = 0; i < v.count; ++i) {
                    const std::string_view s = v.string_at(i);
                    sink = sink + touch(s.data(), s.size());
                }
            try_accessor([&] { sink = sink + static_cast<std::uint32_t>(f.integer(key).value_or(0)); });
            try_accessor([&] { sink = sink + static_cast<std::uint32_t>(f.number(key).value_or(0) != 0); });
            try_accessor([&] { sink = sink + static_cast<std::uint32_t>(f.string(key).value_or("").size()); });
            try_accessor([&] { sink = sink + f.boolean(key).value_or(false); });
            try_accessor([&] { sink = sink + (f.array(key, llamacl::GgufType::string) != nullptr); });
        }
        for (const llamacl::GgufTensor& t : f.tensors()) {
            if (f.tensor(t.name) != &t) fail("tensor() does not return the tensor's own entry");
            if (t.dims.empty() || t.dims.size() > 4) fail("accepted a dimension count outside 1..4");
            if (t.offset % f.alignment() != 0) fail("accepted a misaligned tensor");
            if (t.bytes == 0 || t.bytes > size) fail("a tensor larger than the file");
            sink = sink + touch(t.data, t.bytes) + static_cast<std::uint32_t>(t.rows());
        }
        try_accessor([&] { sink = sink + static_cast<std::uint32_t>(llamacl::read_gguf_model(f).config().dim); });
        try_accessor([&] { exercise_vocabulary(llamacl::Tokenizer::from_gguf(f, 0)); });
    } catch (const llamacl::Error& e) {
        check_message(e);
    }
    return 0;
}
