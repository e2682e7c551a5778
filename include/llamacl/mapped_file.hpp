#pragma once
// A read-only private mapping of a whole file, guarded against the file shrinking under it. A read of a
// page past the file's new end (truncated, or overwritten in place, while llama-cl runs) raises SIGBUS;
// the guard's handler ends the process with one line naming the file, exit status 1, instead of a crash.
// The mapping is read until the run ends (the CPU reference, token embeddings, streamed layers), so
// copying the weights out once would not remove the need for it.
#include <cstddef>
#include <string>

namespace llamacl {

class MappedFile {
public:
    // Maps the first `bytes` bytes of the open file `fd` (which may be closed afterwards); throws Error
    // naming `path` when the mapping fails. Zero bytes map nothing.
    MappedFile(int fd, std::size_t bytes, const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::byte* data() const { return static_cast<const std::byte*>(map_); }
    std::size_t size() const { return bytes_; }

private:
    void* map_ = nullptr;
    std::size_t bytes_ = 0;
    int guard_ = -1;  // its slot in the SIGBUS handler's table; -1 when unguarded (the table was full)
};

// Puts the guard's handler first in line for SIGBUS (the handler found there gets the faults that are not
// a guarded mapping's). An OpenCL compiler may install its own over it: LLVM's, in PoCL, resets SIGBUS to
// the default as it is entered, so a second thread faulting on a guarded page in that moment would be
// killed without the message. The device calls this after every program build.
void guard_sigbus_first();

// The descriptor the guard's handler writes its line to: stderr, or, while a kernel build holds stderr in a
// file of its own (device.cpp's HeldStderr), a duplicate of the real one, so that the line still reaches
// the user when a driver's thread faults during the build.
void set_sigbus_report_fd(int fd);

}  // namespace llamacl
