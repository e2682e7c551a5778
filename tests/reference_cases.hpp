#pragma once
// The run.c reference cases in shared/reference/cases.tsv (runq.c's in cases-q80.tsv), and running
// llama-cl on one of them.
#include <filesystem>
#include <string>
#include <vector>

#include "support.hpp"

namespace llamacl::test {

struct ReferenceCase {
    std::string id, model, tokenizer, temperature, topp, seed, steps, prompt, expected;
};

// Parses a cases file of shared/reference (tab-separated, empty fields allowed, first line is the header).
std::vector<ReferenceCase> load_cases(const std::filesystem::path& shared, const std::string& file = "cases.tsv");

// The `llama-cl generate` arguments for a case, run.c's flags plus `extra`.
std::string generate_args(const std::filesystem::path& shared, const ReferenceCase& c, const std::string& extra = "");

}  // namespace llamacl::test
