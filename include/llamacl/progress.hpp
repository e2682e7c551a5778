#pragma once
// One status line on stderr while something slow runs (kernels compiling, weights uploading, bench's
// steps), rewritten in place and cleared when it ends, so that a first run is never silent. Only when
// stderr is a terminal: pipes and files get nothing, and stdout never does.
#include <cstddef>
#include <string>

namespace llamacl {

// -q: no status lines even on a terminal.
void set_progress_quiet(bool quiet);

// Shows `text` as the status line for its lifetime (the innermost one wins), then clears the line.
class ProgressLine {
public:
    explicit ProgressLine(const std::string& text);
    ~ProgressLine();
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;
    // Rewrites the line (e.g. "run 2 of 5").
    void update(const std::string& text) const;

private:
    std::size_t index_;  // in the stack of live lines; they end in reverse order of their start
};

}  // namespace llamacl
