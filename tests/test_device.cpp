// The OpenCL device layer on whatever devices this machine has (PoCL at least: CI always installs
// it, so a missing platform is a failure here, not a skip).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llamacl/device.hpp"
#include "llamacl/error.hpp"
#include "llamacl/layer_stack.hpp"
#include "llamacl/position_rows.hpp"

namespace llamacl {
namespace {

std::string lowercase(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string uppercase(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

// The message of the Error that `f` throws, as the command prints it; fails the test when it throws
// nothing or something else.
template <typename F>
std::string error_message(F f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected llamacl::Error";
    return {};
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

TEST(DeviceList, FindsDevicesWithSaneLimits) {
    const std::vector<DeviceInfo> devices = list_devices();
    ASSERT_FALSE(devices.empty());
    for (const DeviceInfo& d : devices) {
        SCOPED_TRACE(d.name);
        EXPECT_FALSE(d.name.empty());
        EXPECT_FALSE(d.platform_name.empty());
        EXPECT_EQ(d.version.rfind("OpenCL ", 0), 0u) << d.version;
        EXPECT_TRUE(d.type == "GPU" || d.type == "CPU" || d.type == "ACCELERATOR" || d.type == "OTHER") << d.type;
        EXPECT_EQ(d.is_cpu, d.type == "CPU");
        EXPECT_GT(d.global_mem_bytes, 0u);
        EXPECT_GT(d.max_alloc_bytes, 0u);
        EXPECT_LE(d.max_alloc_bytes, d.global_mem_bytes);
        EXPECT_GT(d.local_mem_bytes, 0u);
        EXPECT_GE(d.compute_units, 1u);
        EXPECT_GE(d.max_work_group_size, 1u);
    }
}

TEST(DeviceList, TableShowsEveryDevice) {
    const std::vector<DeviceInfo> devices = list_devices();
    const std::string table = format_device_table(devices);
    EXPECT_NE(table.find("name"), std::string::npos) << table;
    for (const DeviceInfo& d : devices) {
        const std::string index = std::to_string(d.platform_index) + "." + std::to_string(d.device_index);
        EXPECT_NE(table.find(index + " "), std::string::npos) << table;
        EXPECT_NE(table.find(d.name), std::string::npos) << table;
        EXPECT_NE(table.find(d.type), std::string::npos) << table;
    }
}

TEST(DeviceErrors, NamesCodes) {
    EXPECT_EQ(cl_error_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
    EXPECT_EQ(cl_error_name(CL_INVALID_BUFFER_SIZE), "CL_INVALID_BUFFER_SIZE");
    EXPECT_EQ(cl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
    EXPECT_EQ(cl_error_name(-72), "CL_MAX_SIZE_RESTRICTION_EXCEEDED");
    EXPECT_EQ(cl_error_name(-9999), "CL_UNKNOWN_ERROR(-9999)");
    EXPECT_EQ(describe(cl::Error(CL_OUT_OF_RESOURCES, "clEnqueueNDRangeKernel")),
              "clEnqueueNDRangeKernel failed: CL_OUT_OF_RESOURCES");
}

TEST(DeviceSelect, DefaultPrefersGpu) {
    const std::vector<DeviceInfo> devices = list_devices();
    const auto gpu = std::find_if(devices.begin(), devices.end(), [](const DeviceInfo& d) { return d.type == "GPU"; });
    const DeviceInfo& expected = gpu != devices.end() ? *gpu : devices.front();
    const Device device = Device::open("", "");
    EXPECT_EQ(device.info().platform_index, expected.platform_index);
    EXPECT_EQ(device.info().device_index, expected.device_index);
}

TEST(DeviceSelect, ByIndex) {
    const DeviceInfo last = list_devices().back();
    const Device device = Device::open(std::to_string(last.platform_index), std::to_string(last.device_index));
    EXPECT_EQ(device.info().platform_index, last.platform_index);
    EXPECT_EQ(device.info().device_index, last.device_index);
    EXPECT_EQ(device.info().name, last.name);

    const Device dotted = Device::open("", std::to_string(last.platform_index) + "." + std::to_string(last.device_index));
    EXPECT_EQ(dotted.info().platform_index, last.platform_index);
    EXPECT_EQ(dotted.info().device_index, last.device_index);
}

TEST(DeviceSelect, ByNameSubstringIgnoringCase) {
    const std::vector<DeviceInfo> devices = list_devices();
    const DeviceInfo& target = devices.back();
    // A middle slice of the name, in the other case, must still find a device with that name.
    const std::string slice = uppercase(target.name.substr(target.name.size() / 4, std::max<std::size_t>(1, target.name.size() / 2)));
    const auto expected = std::find_if(devices.begin(), devices.end(), [&](const DeviceInfo& d) {
        return lowercase(d.name).find(lowercase(slice)) != std::string::npos;
    });
    ASSERT_NE(expected, devices.end());
    const Device device = Device::open("", slice);
    EXPECT_EQ(device.info().platform_index, expected->platform_index);
    EXPECT_EQ(device.info().device_index, expected->device_index);

    const Device by_platform = Device::open(lowercase(target.platform_name), "");
    EXPECT_EQ(by_platform.info().platform_name, target.platform_name);
}

TEST(DeviceSelect, UnknownSelectorListsDevices) {
    const std::vector<DeviceInfo> devices = list_devices();
    for (const auto& [platform, device] : std::vector<std::pair<std::string, std::string>>{
             {"", "no-such-device-xyz"}, {"no-such-platform-xyz", ""}, {"", "99"}, {"99", ""}}) {
        const std::string message = error_message([&] { Device::open(platform, device); });
        EXPECT_NE(message.find("no OpenCL device matches"), std::string::npos) << message;
        EXPECT_NE(message.find((device.empty() ? platform : device)), std::string::npos) << message;
        for (const DeviceInfo& d : devices) EXPECT_NE(message.find(d.name), std::string::npos) << message;
    }
}

TEST(DeviceSelect, ProfilingQueue) {
    const Device plain = Device::open("", "");
    const Device profiled = Device::open("", "", true);
    EXPECT_EQ(plain.queue().getInfo<CL_QUEUE_PROPERTIES>() & CL_QUEUE_PROFILING_ENABLE, 0u);
    EXPECT_NE(profiled.queue().getInfo<CL_QUEUE_PROPERTIES>() & CL_QUEUE_PROFILING_ENABLE, 0u);
}

TEST(DeviceBuffer, RoundTrip) {
    Device device = Device::open("", "");
    const std::vector<float> data = random_floats(10007, 1);
    const std::size_t bytes = data.size() * sizeof(float);
    cl::Buffer buffer = device.allocate(bytes, "round-trip buffer");
    device.queue().enqueueWriteBuffer(buffer, CL_TRUE, 0, bytes, data.data());
    std::vector<float> back(data.size(), 0.0f);
    device.queue().enqueueReadBuffer(buffer, CL_TRUE, 0, bytes, back.data());
    EXPECT_EQ(back, data);
}

TEST(DeviceKernel, CopyF32CopiesExactly) {
    Device device = Device::open("", "");
    const std::size_t n = 4 * 1001;  // a work size that is not a power of two
    const std::size_t bytes = n * sizeof(float);
    const std::vector<float> data = random_floats(n, 2);
    const std::vector<float> zeros(n, 0.0f);
    cl::Buffer src = device.allocate(bytes, "copy source", CL_MEM_READ_ONLY);
    cl::Buffer dst = device.allocate(bytes, "copy destination", CL_MEM_WRITE_ONLY);
    device.queue().enqueueWriteBuffer(src, CL_TRUE, 0, bytes, data.data());
    device.queue().enqueueWriteBuffer(dst, CL_TRUE, 0, bytes, zeros.data());

    const cl::Program program = device.build_program("");
    cl::Kernel copy(program, "copy_f32");
    copy.setArg(0, src);
    copy.setArg(1, dst);
    device.queue().enqueueNDRangeKernel(copy, cl::NullRange, cl::NDRange(n / 4), cl::NullRange);
    std::vector<float> back(n);
    device.queue().enqueueReadBuffer(dst, CL_TRUE, 0, bytes, back.data());
    EXPECT_EQ(back, data);
}

TEST(DeviceBuild, BrokenSourceReportsBuildLog) {
    const Device device = Device::open("", "");
    const std::string message = error_message([&] {
        device.build_program_from_source("__kernel void broken(__global float* x) { x[0] = undeclared_name; }", "");
    });
    EXPECT_NE(message.find("kernel build failed on " + device.info().name), std::string::npos) << message;
    EXPECT_NE(message.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos) << message;
    EXPECT_NE(message.find("undeclared_name"), std::string::npos) << message;  // the compiler's diagnostic
}

TEST(DeviceBuild, EmbeddedProgramFailureShowsTheLog) {
    // Turning copy.cl's kernel name into a number breaks the embedded program; the log must show
    // the offending line. (Only clang-based compilers such as PoCL's also honour the #line that
    // names copy.cl; NVIDIA reports "<kernel>:line", so the file name is not asserted.)
    const Device device = Device::open("", "");
    const std::string message = error_message([&] { device.build_program("-Dcopy_f32=123"); });
    EXPECT_NE(message.find("kernel build failed on " + device.info().name), std::string::npos) << message;
    EXPECT_NE(message.find("expected identifier"), std::string::npos) << message;
}

TEST(DeviceBuild, BadOptionFails) {
    const Device device = Device::open("", "");
    const std::string message = error_message([&] { device.build_program("-no-such-option-xyz"); });
    EXPECT_NE(message.find("kernel build failed on " + device.info().name), std::string::npos) << message;
    EXPECT_NE(message.find("-no-such-option-xyz"), std::string::npos) << message;
}

TEST(DeviceAllocate, ReportsSizesWhenTooLarge) {
    const Device device = Device::open("", "");
    const DeviceInfo& info = device.info();
    const std::size_t too_big = static_cast<std::size_t>(info.max_alloc_bytes) + 1;
    const std::string message = error_message([&] { device.allocate(too_big, "the KV cache"); });
    EXPECT_NE(message.find("the KV cache"), std::string::npos) << message;
    EXPECT_NE(message.find(info.name), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(too_big)), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(info.max_alloc_bytes)), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(info.global_mem_bytes)), std::string::npos) << message;
}

TEST(DeviceAllocate, TurnsDriverErrorsIntoErrors) {
    // A zero-byte buffer is refused by the driver itself (CL_INVALID_BUFFER_SIZE).
    const Device device = Device::open("", "");
    const std::string message = error_message([&] { device.allocate(0, "an empty buffer"); });
    EXPECT_NE(message.find("an empty buffer"), std::string::npos) << message;
    EXPECT_NE(message.find("CL_INVALID_BUFFER_SIZE"), std::string::npos) << message;
}

// One tensor of every layer (layer_stack.hpp): stacked, one allocation whose parts start at the device's
// base-address alignment and are also sub-buffers; otherwise separate allocations. Either way each
// layer's floats go in with write() and come back out of layer(l), and stacked, out of the whole at
// l x stride.
// A table of rows per position is written as positions are reached, in blocks that double from the first
// (kFirstRows), each row its fill; the positions past the table's are clamped.
TEST(DevicePositionRows, RowsAreWrittenInDoublingBlocksAsPositionsAreReached) {
    Device device = Device::open("", "");
    const int positions = 3 * PositionRows::kFirstRows + 5;
    std::vector<std::pair<int, int>> blocks;
    PositionRows table(
        device, positions, 2 * sizeof(cl_int),
        [&](int first, int count, std::byte* out) {
            blocks.emplace_back(first, count);
            for (int i = 0; i < count; ++i) {
                const cl_int row[2] = {first + i, -(first + i)};
                std::memcpy(out + i * sizeof row, row, sizeof row);
            }
        },
        "test rows");
    EXPECT_EQ(table.rows(), PositionRows::kFirstRows);
    table.reach(PositionRows::kFirstRows - 1);
    table.reach(PositionRows::kFirstRows);
    EXPECT_EQ(table.rows(), 2 * PositionRows::kFirstRows);
    table.reach(positions + 100);
    EXPECT_EQ(table.rows(), positions);
    const std::vector<std::pair<int, int>> expected = {
        {0, PositionRows::kFirstRows},
        {PositionRows::kFirstRows, PositionRows::kFirstRows},
        {2 * PositionRows::kFirstRows, PositionRows::kFirstRows + 5}};
    EXPECT_EQ(blocks, expected);
    std::vector<cl_int> back(2 * static_cast<std::size_t>(positions));
    device.queue().enqueueReadBuffer(table.buffer(), CL_TRUE, 0, back.size() * sizeof(cl_int), back.data());
    for (int pos = 0; pos < positions; ++pos) {
        ASSERT_EQ(back[2 * pos], pos);
        ASSERT_EQ(back[2 * pos + 1], -pos);
    }
}

TEST(DeviceLayerStack, EveryLayerRoundTripsThroughItsPartAndTheWhole) {
    Device device = Device::open("", "");
    const std::size_t floats = 37;  // not a multiple of any alignment
    const int layers = 3;
    std::vector<std::vector<float>> data(layers, std::vector<float>(floats));
    for (int l = 0; l < layers; ++l)
        for (std::size_t i = 0; i < floats; ++i) data[l][i] = static_cast<float>(100 * l) + static_cast<float>(i) / 8;
    for (const bool stacked : {true, false}) {
        const LayerStack stack = LayerStack::allocate(device, floats, layers, stacked, "test tensor");
        EXPECT_EQ(stack.whole()() != nullptr, stacked);
        for (int l = 0; l < layers; ++l) stack.write(device.queue(), l, data[l].data());
        for (int l = 0; l < layers; ++l) {
            std::vector<float> back(floats);
            device.queue().enqueueReadBuffer(stack.layer(l), CL_TRUE, 0, floats * sizeof(float), back.data());
            EXPECT_EQ(back, data[l]) << "layer " << l << (stacked ? " (sub-buffer)" : " (own allocation)");
        }
        if (!stacked) continue;
        EXPECT_GE(stack.stride(), floats);
        EXPECT_EQ(stack.stride() * sizeof(float) % device.info().base_align_bytes, 0u);
        std::vector<float> whole(stack.stride() * layers);
        device.queue().enqueueReadBuffer(stack.whole(), CL_TRUE, 0, whole.size() * sizeof(float), whole.data());
        for (int l = 0; l < layers; ++l)
            EXPECT_TRUE(std::equal(data[l].begin(), data[l].end(), whole.begin() + l * stack.stride())) << "layer " << l;
    }
}

// Wrapped layers (a CPU device's weights read in place) are the host's bytes at any alignment, and so is
// their whole, when stacked, where the parts follow each other; parts apart have no whole.
TEST(DeviceLayerStack, WrappedLayersAreTheHostBytesAtAnyAlignment) {
    Device device = Device::open("", "");
    const std::size_t floats = 37;  // parts one float apart: at no buffer alignment
    std::vector<float> host(4 * floats + 2);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) / 8;
    const auto at = [&](std::size_t i) { return reinterpret_cast<const std::byte*>(host.data() + i); };
    const std::vector<const std::byte*> parts{at(1), at(1 + floats), at(1 + 2 * floats)};
    for (const bool stacked : {false, true}) {
        const LayerStack stack = LayerStack::wrap(device, parts, floats, sizeof(float), stacked, "test tensor");
        for (int l = 0; l < 3; ++l) {
            std::vector<float> back(floats);
            device.queue().enqueueReadBuffer(stack.layer(l), CL_TRUE, 0, floats * sizeof(float), back.data());
            EXPECT_TRUE(std::equal(back.begin(), back.end(), host.begin() + 1 + l * floats)) << "layer " << l;
        }
        if (!stacked) {
            EXPECT_EQ(stack.whole()(), nullptr);
            continue;
        }
        ASSERT_NE(stack.whole()(), nullptr);
        EXPECT_EQ(stack.stride(), floats);
        std::vector<float> whole(3 * floats);
        device.queue().enqueueReadBuffer(stack.whole(), CL_TRUE, 0, whole.size() * sizeof(float), whole.data());
        EXPECT_TRUE(std::equal(whole.begin(), whole.end(), host.begin() + 1));
    }
    const std::vector<const std::byte*> apart{at(1), at(2 + floats), at(3 + 2 * floats)};
    EXPECT_FALSE(LayerStack::contiguous(apart, floats * sizeof(float)));
    EXPECT_EQ(LayerStack::wrap(device, apart, floats, sizeof(float), true, "test tensor").whole()(), nullptr);
}

}  // namespace
}  // namespace llamacl
