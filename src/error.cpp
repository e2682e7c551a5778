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

std::string output_failure(std::FILE* out) {
    errno = 0;
    if (std::fflush(out) == 0 && !std::ferror(out)) return {};
    // errno is the failed call's when the flush failed; an earlier failed write may have left none.
    return std::string("cannot write the output: ") + (errno ? std::strerror(errno) : "I/O error");
}

// Generating into the void after a failed write would only waste the device's time.
void flush_or_throw(std::FILE* out) {
    if (std::string failure = output_failure(out); !failure.empty()) throw Error(std::move(failure));
}

}  // namespace llamacl
