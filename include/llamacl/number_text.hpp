#pragma once
// A number as messages, reports and pictures print it: printf's conversion `fmt` (one double, e.g.
// "%g", "%.3g") into a string.
#include <string>

namespace llamacl {

std::string number_text(const char* fmt, double v);
// A count and its noun, singular for one: "1 token", "3 tokens" (`noun` takes an s).
std::string counted(long long n, const std::string& noun);

}  // namespace llamacl
