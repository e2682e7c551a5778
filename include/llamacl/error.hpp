#pragma once
// One exception type for everything a user can get wrong. main() prints what() as a single line
// on stderr and exits with exit_code(): 1 for bad files and devices, 2 for bad command-line usage.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace llamacl {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message, int exit_code = 1)
        : std::runtime_error(message), exit_code_(exit_code) {}
    int exit_code() const { return exit_code_; }

private:
    int exit_code_;
};

// A command-line value that is out of range: exit status 2, like CLI11's own parse errors.
inline Error usage_error(const std::string& message) { return Error(message, 2); }

// `text` with every control character written as an escape (\n, \t, \r, \xNN, \\ for the backslash), so
// a file name, flag value or environment variable echoed in a message cannot break its line.
std::string printable(std::string_view text);
// Prints "llama-cl: MESSAGE" as one line on stderr, control characters escaped: every message goes out here.
void report(std::string_view message);

// The command being run, for remedies that depend on it, while this object lives ("generate" outside any).
class RunningCommand {
public:
    explicit RunningCommand(std::string name);
    ~RunningCommand();
    RunningCommand(const RunningCommand&) = delete;
    RunningCommand& operator=(const RunningCommand&) = delete;

private:
    std::string previous_;
};
// How to run the model without a device, for a message about one that cannot: "run generate with --backend
// cpu"; in bench, which measures devices only, timing the reference with generate instead.
std::string cpu_reference_remedy();

// The reader of the output went away (EPIPE: `| head` closed the pipe): a normal end for a filter, which
// ends the command quietly, with status 0.
class ReaderGone : public std::exception {
public:
    const char* what() const noexcept override { return "the output's reader went away"; }
};

// Flushes `out`; empty when everything written to it arrived or its reader went away, else "cannot write
// the output: REASON" (a full disk, an I/O error: run.c ignores them, we do not).
std::string output_failure(std::FILE* out);
// Throws ReaderGone where the reader went away, else an Error with output_failure()'s text when it is not
// empty.
void flush_or_throw(std::FILE* out);

}  // namespace llamacl
