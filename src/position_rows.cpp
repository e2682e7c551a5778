#include "llamacl/position_rows.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace llamacl {

PositionRows::PositionRows(const Device& device, int positions, std::size_t row_bytes, Fill fill,
                           const std::string& what)
    : device_(device),
      buffer_(device.allocate(static_cast<std::size_t>(positions) * row_bytes, what, CL_MEM_READ_ONLY)),
      positions_(positions),
      row_bytes_(row_bytes),
      fill_(std::move(fill)) {
    reach(0);
}

void PositionRows::reach(int last) {
    if (last < rows_) return;
    // Doubling: a run reaching position p has written fewer than 2p rows, in log2(p) blocks.
    const int end = static_cast<int>(std::min<long long>(
        positions_, std::max({static_cast<long long>(last) + 1, 2LL * rows_, static_cast<long long>(kFirstRows)})));
    std::vector<std::byte> block(static_cast<std::size_t>(end - rows_) * row_bytes_);
    fill_(rows_, end - rows_, block.data());
    // Blocking: the block is freed on return (a write at a new block, a few times a run).
    device_.queue().enqueueWriteBuffer(buffer_, CL_TRUE, static_cast<std::size_t>(rows_) * row_bytes_, block.size(),
                                       block.data());
    rows_ = end;
}

}  // namespace llamacl
