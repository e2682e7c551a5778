#pragma once
// An output file written aside and renamed into place, so that it appears complete or not at all and a
// failed write leaves an earlier file intact (quantize's checkpoint, bench's and check's --plot). It
// refuses an output that is one of the command's inputs (the same file by any name: a symlink, a hard
// link) or that exists as anything but a regular file (a directory, FIFO or device). The file is written
// as `.llamacl-XXXXXX` in the output's directory, a short name so that any legal output name works, and
// that file is removed on every exit path: an exception, a fatal signal (SIGINT, SIGTERM, SIGHUP,
// SIGQUIT, SIGXFSZ), and the mapping guard's exit on SIGBUS.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace llamacl {

// A file the command reads, with the name a refusal gives it ("the input checkpoint", "the tokenizer").
struct InputFile {
    std::string path;
    std::string role;
};

class AtomicFile {
public:
    // Checks `path` against `inputs` and creates the file beside it. Errors start with `owner`, the command
    // or flag that writes ("quantize", "--plot"), name the path and say what to do.
    AtomicFile(std::string path, const std::vector<InputFile>& inputs, std::string owner);
    ~AtomicFile();  // removes the file unless commit() put it in place
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(const void* data, std::size_t bytes);
    void write(std::string_view text) { write(text.data(), text.size()); }
    // Puts what was written on disk and renames it over the output path.
    void commit();

    const std::string& path() const { return path_; }

private:
    [[noreturn]] void fail_write(int error) const;

    std::string path_;
    std::string owner_;
    std::string aside_;  // the file being written, beside path_
    int fd_ = -1;
    int slot_ = -1;  // aside_'s entry in the signal handlers' table; -1 once renamed or removed
};

// Unlinks every output file still being written. Async-signal-safe: for a handler that ends the process
// (the mapping guard's on SIGBUS).
void remove_unfinished_outputs() noexcept;

}  // namespace llamacl
