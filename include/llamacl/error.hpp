#pragma once
// One exception type for everything a user can get wrong. main() prints what() as a single line
// on stderr and exits with exit_code(): 1 for bad files and devices, 2 for bad command-line usage.
#include <stdexcept>
#include <string>

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

}  // namespace llamacl
