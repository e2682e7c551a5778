#include "llamacl/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace llamacl {

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f) {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02X", c);
            out += escaped;
        } else {
            out += ch;  // bytes of 0x80 and up pass through: UTF-8 names stay readable
        }
    }
    return out;
}

void report(std::string_view message) { std::fprintf(stderr, "llama-cl: %s\n", printable(message).c_str()); }


namespace {
std::string running_command = "generate";
}  // namespace

RunningCommand::RunningCommand(std::string name) : previous_(std::exchange(running_command, std::move(name))) {}

RunningCommand::~RunningCommand() { running_command = std::move(previous_); }

std::string cpu_reference_remedy() {
    if (running_command == "bench")
        return "time the CPU reference with generate --backend cpu, as bench measures OpenCL devices only";
    return "run generate with --backend cpu";
}

namespace {

// Flushes `out`: 0 when everything written arrived, else the failed call's errno (-1 where an earlier
// failed write left none).
int flush_error(std::FILE* out) {
    errno = 0;
    if (std::fflush(out) == 0 && !std::ferror(out)) return 0;
    return errno ? errno : -1;
}

std::string failure_text(int error) {
    return std::string("cannot write the output: ") + (error > 0 ? std::strerror(error) : "I/O error");
}

}  // namespace

std::string output_failure(std::FILE* out) {
    const int error = flush_error(out);
    return error == 0 || error == EPIPE ? std::string() : failure_text(error);
}

// Generating into the void after a failed write would only waste the device's time.
void flush_or_throw(std::FILE* out) {
    const int error = flush_error(out);
    if (error == EPIPE) throw ReaderGone();
    if (error != 0) throw Error(failure_text(error));
}

}  // namespace llamacl
