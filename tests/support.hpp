#pragma once
// Helpers shared by the tests: where the reference data lives, scratch files, running the binary.
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace llamacl::test {

// LLAMACL_SHARED_DIR, else ../shared next to the source tree; nullopt when it does not exist, so
// tests that need it can GTEST_SKIP() with a message (.ci/run checks the directory separately).
std::optional<std::filesystem::path> shared_dir();

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

private:
    std::filesystem::path path_;
};

struct CommandResult {
    int exit_code;
    std::string out;  // stdout
    std::string err;  // stderr
    // The largest resident set of the command or any process it waited for (started from a small launcher
    // process: support.cpp).
    long peak_rss_kib = 0;
};

// The error contract for one run, `what` naming it in a failure: exit status `code`, nothing on stdout, one
// line on stderr that starts "llama-cl: " and contains each of `mentions`.
void expect_error(const CommandResult& r, int code, std::initializer_list<std::string> mentions,
                  const std::string& what);
// Runs the built llama-cl binary; `args` is a shell fragment, so quote paths with quote().
CommandResult run_llama_cl(const std::string& args);
// Single-quotes a string for the shell.
std::string quote(const std::string& s);
// Runs any command line through the shell, capturing stdout, stderr and the peak resident set (wait4's
// rusage).
CommandResult run_command(const std::string& command);
std::string read_file(const std::filesystem::path& path);
// n floats drawn uniformly from [lo, hi) by a Mersenne twister seeded with `seed`.
std::vector<float> uniform_floats(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f);
// Resident memory of this process in bytes (/proc/self/statm), 0 where the system does not say.
std::uint64_t resident_bytes();

}  // namespace llamacl::test

// Skips the current test with a message when the shared reference data is absent.
#define LLAMACL_REQUIRE_SHARED(var)                                                       \
    auto var##_opt = ::llamacl::test::shared_dir();                                      \
    if (!var##_opt) GTEST_SKIP() << "shared reference data not found (set LLAMACL_SHARED_DIR)"; \
    const std::filesystem::path var = *var##_opt
