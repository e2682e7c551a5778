#include "llamacl/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <vector>

namespace llamacl {

namespace {

bool quiet = false;
std::vector<std::string> lines;  // the live ProgressLines' texts, innermost last

bool shown() { return !quiet && isatty(STDERR_FILENO); }

// "\r" returns to the line's start and "\033[K" erases it: the next text or the end leaves no remnant.
void write_line(const std::string& text) {
    if (!shown()) return;
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    std::fflush(stderr);
}

}  // namespace

void set_progress_quiet(bool q) { quiet = q; }

ProgressLine::ProgressLine(const std::string& text) : index_(lines.size()) {
    lines.emplace_back();
    update(text);
}

// The enclosing line shows again when an inner one ends (a build inside bench's "loading the model").
ProgressLine::~ProgressLine() {
    lines.pop_back();
    write_line(lines.empty() ? "" : lines.back());
}

void ProgressLine::update(const std::string& text) const {
    lines[index_] = "llama-cl: " + text;
    if (index_ + 1 == lines.size()) write_line(lines[index_]);
}

}  // namespace llamacl
