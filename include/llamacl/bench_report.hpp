#pragma once
// `llama-cl bench`'s reports of a BenchResult: the text a person reads and the JSON a script reads, with
// the same figures.
#include <string>

#include "llamacl/bench.hpp"

namespace llamacl {

std::string format_bench_text(const BenchResult& result);
// One JSON object and a newline; fields in a fixed order, non-finite numbers as null.
std::string format_bench_json(const BenchResult& result);

}  // namespace llamacl
