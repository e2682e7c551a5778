#pragma once
// llama.cpp's results for the shared GGUF files (shared/reference/gguf/expected.tsv): the mean negative
// log-likelihood of text1.txt per model.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace llamacl::test {

struct ExpectedNll {
    std::string model;  // the file's name in shared/models/gguf
    int tokens = 0;
    double mean_nll = 0.0;
};

// expected.tsv's `MODEL nll TEXT tokens N mean_nll X` rows.
inline std::vector<ExpectedNll> llama_cpp_nlls(const std::filesystem::path& shared) {
    std::ifstream in(shared / "reference" / "gguf" / "expected.tsv");
    std::vector<ExpectedNll> rows;
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        std::string kind, text, word;
        ExpectedNll e;
        std::getline(fields, e.model, '\t');
        std::getline(fields, kind, '\t');
        std::getline(fields, text, '\t');
        if (kind == "nll" && fields >> word >> e.tokens >> word >> e.mean_nll) rows.push_back(e);
    }
    return rows;
}

}  // namespace llamacl::test
