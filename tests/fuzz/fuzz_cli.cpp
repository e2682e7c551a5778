// libFuzzer target: the command line itself. Input: the arguments after the program name, separated by
// NUL bytes. Every command is built and argv parsed and checked (parse_command_line), opening no file and
// no device; the parse must end in a status of its own (help, version, a usage error) or hand over to a
// command (-1), never throw, crash or hang.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llamacl/cli.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    constexpr std::size_t kMaxArgs = 64;  // more only repeats what a few already reach
    std::vector<std::string> args = {"llama-cl"};
    if (size > 0) args.emplace_back();
    for (std::size_t i = 0; i < size && args.size() <= kMaxArgs; ++i) {
        if (data[i] == 0)
            args.emplace_back();
        else
            args.back() += static_cast<char>(data[i]);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int status = llamacl::parse_command_line(static_cast<int>(args.size()), argv.data());
    // 0: help or version; 1: they could not be written; 2: a usage error; -1: a command would run.
    if (status != 0 && status != 1 && status != 2 && status != -1) {
        std::fprintf(stderr, "fuzz_cli: parse_command_line returned %d\n", status);
        std::abort();
    }
    return 0;
}
