#pragma once
// run.c's encode(), transcribed as literally as C++ allows (a linear rescan of every pair after each
// merge, glibc's bsearch over the strcmp-sorted vocabulary), as an oracle for Tokenizer::encode, which
// computes the same merges with a heap. Used by the differential tests and by the tokenizer fuzzer.
// Only for tokenizers that Tokenizer::encode accepts (a " " piece, byte-fallback ids in range).
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "llamacl/tokenizer.hpp"

namespace llamacl::test {

inline std::vector<int> naive_encode(const Tokenizer& t, std::string_view text, bool bos, bool eos) {
    const int n = t.size();
    std::vector<int> sorted(static_cast<std::size_t>(n));
    for (int i = 0; i < n; i++) sorted[static_cast<std::size_t>(i)] = i;
    std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) { return t.piece(a) < t.piece(b); });
    const auto str_lookup = [&](std::string_view s) {
        std::size_t l = 0, u = sorted.size();
        while (l < u) {
            const std::size_t idx = (l + u) / 2;
            const int cmp = s.compare(t.piece(sorted[idx]));
            if (cmp < 0) u = idx;
            else if (cmp > 0) l = idx + 1;
            else return sorted[idx];
        }
        return -1;
    };

    text = text.substr(0, std::min(text.size(), text.find('\0')));
    std::vector<int> tokens;
    if (bos) tokens.push_back(1);
    if (!text.empty()) tokens.push_back(str_lookup(" "));
    std::string buf;
    for (std::size_t i = 0; i < text.size(); i++) {
        const auto c = static_cast<unsigned char>(text[i]);
        if ((c & 0xC0) != 0x80) buf.clear();
        buf.push_back(static_cast<char>(c));
        const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
        if ((next & 0xC0) == 0x80 && buf.size() < 4) continue;
        const int id = str_lookup(buf);
        if (id != -1) {
            tokens.push_back(id);
        } else {
            for (const char b : buf) tokens.push_back(static_cast<unsigned char>(b) + 3);
        }
        buf.clear();
    }
    while (true) {
        float best_score = -1e10f;
        int best_id = -1;
        int best_idx = -1;
        for (std::size_t i = 0; i + 1 < tokens.size(); i++) {
            const std::string merged = std::string(t.piece(tokens[i])) + std::string(t.piece(tokens[i + 1]));
            const int id = str_lookup(merged);
            if (id != -1 && t.score(id) > best_score) {
                best_score = t.score(id);
                best_id = id;
                best_idx = static_cast<int>(i);
            }
        }
        if (best_idx == -1) break;
        tokens[static_cast<std::size_t>(best_idx)] = best_id;
        tokens.erase(tokens.begin() + best_idx + 1);
    }
    if (eos) tokens.push_back(2);
    return tokens;
}

}  // namespace llamacl::test
