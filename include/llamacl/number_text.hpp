#pragma once
// A number as messages, reports and pictures print it: printf's conversion `fmt` (one double, e.g.
// "%g", "%.3g") into a string.
#include <string>

namespace llamacl {

std::string number_text(const char* fmt, double v);

}  // namespace llamacl
