// libFuzzer target: Tokenizer::load on an arbitrary file, then encode, decode and the printing rules on
// arbitrary text. Input: one flags byte (bit 0: BOS, bit 1: EOS), one text-length byte, the text, then
// the tokenizer file. For short texts, encode is checked against a literal transcription of run.c's
// quadratic merge loop (naive_encode.hpp), so the heap-based merge must make run.c's merges exactly.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/tokenizer.hpp"
#include "naive_encode.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", what);
    std::abort();
}

// The tokenizer file lives in an anonymous memory file, reopened by Tokenizer::load through /proc.
const std::string& tokenizer_path(const std::uint8_t* data, std::size_t size) {
    static const int fd = memfd_create("fuzz-tokenizer", MFD_CLOEXEC);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (fd < 0 || ftruncate(fd, 0) != 0) fail("cannot create the memory file");
    if (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) fail("cannot write the memory file");
    return path;
}

void check_error(const llamacl::Error& e, const std::string& path) {
    const std::string msg = e.what();
    if (msg.rfind(path + ": ", 0) != 0) fail("an error message that does not name the file");
    if (msg.find('\n') != std::string::npos) fail("an error message of more than one line");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const bool bos = data[0] & 1, eos = data[0] & 2;
    const std::size_t text_len = std::min<std::size_t>(data[1], size - 2);
    const std::string_view text(reinterpret_cast<const char*>(data + 2), text_len);
    const std::string& path = tokenizer_path(data + 2 + text_len, size - 2 - text_len);

    std::optional<llamacl::Tokenizer> loaded;
    try {
        loaded.emplace(llamacl::Tokenizer::load(path, 0));
    } catch (const llamacl::Error& e) {
        check_error(e, path);
        return 0;
    }
    const llamacl::Tokenizer& t = *loaded;
    if (t.size() < 1) fail("loaded a tokenizer without entries");
    for (int id = 0; id < t.size(); ++id)
        if (t.piece(id).size() > static_cast<std::size_t>(t.max_token_length())) fail("a piece longer than max_token_length");

    std::vector<int> ids;
    try {
        ids = t.encode(text, bos, eos);
    } catch (const llamacl::Error& e) {
        check_error(e, path);
        return 0;
    }
    for (int id : ids)
        if (id < 0 || id >= t.size()) fail("encode produced an id outside the tokenizer");
    if (text.size() <= 64 && ids != llamacl::test::naive_encode(t, text, bos, eos))
        fail("encode differs from run.c's merge loop");

    // Decode the ids back the way generation prints them, prompt and sampled alike.
    llamacl::PieceWriter writer;
    for (std::size_t i = 1; i < ids.size(); ++i) {
        const std::string_view piece = t.decode(ids[i - 1], ids[i]);
        const std::string_view shown = writer.push(piece, i % 2 == 0);
        if (shown.data() == nullptr || llamacl::printable_piece(piece).data() == nullptr)
            fail("a null view, which fwrite must not get");
    }
    for (const int bad : {-1, t.size(), t.size() + 1000}) {
        try {
            (void)t.decode(1, bad);
            fail("decoded an id outside the tokenizer");
        } catch (const llamacl::Error& e) {
            check_error(e, path);
        }
    }
    return 0;
}
