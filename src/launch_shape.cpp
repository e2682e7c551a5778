#include "llamacl/launch_shape.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>

#include "llamacl/error.hpp"

namespace llamacl {

namespace {

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

int largest_power_of_two_at_most(std::size_t v) {
    int p = 1;
    while (static_cast<std::size_t>(p) * 2 <= v) p *= 2;
    return p;
}

}  // namespace

std::string LaunchShape::describe() const {
    std::string text = std::to_string(row_threads) + " work-item" + (row_threads == 1 ? "" : "s") +
                       " per row, work-groups of " + std::to_string(local_size);
    if (!gpu_family())
        text += family() == ShapeFamily::exact ? ", run.c's sequential loops" : ", float" + std::to_string(vector_width) + " steps";
    else if (ordered)
        text += ", run.c's order of sums";
    return text;
}

LaunchShape choose_launch_shape(const DeviceInfo& device, const WeightFormat& weights) {
    if (!device.is_cpu) return parse_launch_shape("gpu", device);
    return parse_launch_shape(weights.quantized() ? "exact" : "cpu", device);
}

LaunchShape parse_launch_shape(const std::string& text, const DeviceInfo& device) {
    static const std::string kExact = "exact:";
    LaunchShape shape;
    if (text == "cpu") {
        shape = {1, 1, 16};
    } else if (text == "exact") {
        shape = device.is_cpu ? LaunchShape{1, 1, 1} : LaunchShape{16, 256, 1, true};
    } else if (text == "gpu") {
        shape = {16, 256, 1};
    } else {
        const bool exact = text.starts_with(kExact);
        const std::string rows_local = exact ? text.substr(kExact.size()) : text;
        int rows = 0, local = 0;
        char tail = 0;
        if (std::sscanf(rows_local.c_str(), "%dx%d%c", &rows, &local, &tail) != 2 || !is_power_of_two(rows) ||
            !is_power_of_two(local) || local % rows != 0)
            throw usage_error("--work-shape: expected cpu, gpu, exact, ROWxLOCAL or exact:ROWxLOCAL with powers of "
                              "two, ROW dividing LOCAL (e.g. 32x256), got '" + text + "'");
        shape = {rows, local, 1, exact && rows > 1};
    }
    // Respect the device's limit; a row never has more work-items than its group.
    shape.local_size = std::min(shape.local_size, largest_power_of_two_at_most(device.max_work_group_size));
    shape.row_threads = std::min(shape.row_threads, shape.local_size);
    shape.ordered = shape.ordered && shape.row_threads > 1;
    return shape;
}

LaunchShape launch_shape_for(const std::optional<LaunchShape>& asked, const DeviceInfo& device,
                             const WeightFormat& weights) {
    return asked ? shape_for(*asked, weights) : choose_launch_shape(device, weights);
}

LaunchShape shape_for(const LaunchShape& shape, const WeightFormat& weights) {
    // Work-groups of 8: a work-item alone leaves the rest of its warp idle, and larger groups leave
    // compute units without rows of the smaller matrices.
    return shape.ordered && !weights.quantized() ? LaunchShape{1, 8, 1} : shape;
}

}  // namespace llamacl
