#pragma once
// A device table of one row per position a run may reach (the RoPE table's cos and sin, the token kernel's
// attention chunk lengths), written from the host as the run reaches its positions, in blocks that double:
// a context of millions of positions (a hostile header, or -n 0 on a long one) costs the memory and time
// of the positions reached, not of the whole context up front.
#include <cstddef>
#include <functional>
#include <string>

#include "llamacl/device.hpp"

namespace llamacl {

class PositionRows {
public:
    // fill(first, count, out) writes rows first .. first + count - 1, row_bytes each, at out.
    using Fill = std::function<void(int first, int count, std::byte* out)>;
    // A table of `positions` rows, the first block written now.
    PositionRows(const Device& device, int positions, std::size_t row_bytes, Fill fill, const std::string& what);

    const cl::Buffer& buffer() const { return buffer_; }
    // Rows through position `last` on the device before any command enqueued after this call.
    void reach(int last);
    int rows() const { return rows_; }  // written so far

    // The first block: every context of the models we know at once, so that their runs write the table
    // only at load.
    static constexpr int kFirstRows = 4096;

private:
    const Device& device_;
    cl::Buffer buffer_;
    int positions_;
    std::size_t row_bytes_;
    Fill fill_;
    int rows_ = 0;
};

}  // namespace llamacl
