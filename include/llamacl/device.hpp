#pragma once
// The OpenCL device layer: finding and opening a device, building the embedded kernels, allocating
// buffers, and turning OpenCL error codes into messages a user can act on. Every driver quirk the
// project has to work around lives in src/device.cpp, so the rest of the code sees one plain
// OpenCL 1.2 device. Failures leave this layer as llamacl::Error, never as a bare cl::Error.
#include <CL/opencl.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llamacl {

// The symbolic name of an OpenCL error code ("CL_OUT_OF_RESOURCES"). Codes outside the standard
// and common extension sets come back as "CL_UNKNOWN_ERROR(-9999)", so the number is never lost.
std::string cl_error_name(cl_int code);

// "clEnqueueNDRangeKernel failed: CL_OUT_OF_RESOURCES".
std::string describe(const cl::Error& e);

struct DeviceInfo {
    int platform_index = 0;  // position in clGetPlatformIDs
    int device_index = 0;    // position within its platform
    std::string platform_name, name, vendor;
    std::string version;         // CL_DEVICE_VERSION, e.g. "OpenCL 3.0 CUDA"
    // The -cl-std= of kernels that use OpenCL C 2.0's memory scopes (device fences, the token kernel's grid
    // barrier): "CL3.0" or "CL2.0" as CL_DEVICE_VERSION says, empty on an OpenCL 1.x device, which has none.
    std::string scopes_standard;
    std::string driver_version;  // CL_DRIVER_VERSION
    std::string type;            // "GPU", "CPU", "ACCELERATOR" or "OTHER"
    bool is_cpu = false;
    std::uint64_t global_mem_bytes = 0, max_alloc_bytes = 0, local_mem_bytes = 0;
    std::uint64_t global_cache_bytes = 0;  // CL_DEVICE_GLOBAL_MEM_CACHE_SIZE: the last-level cache, or 0
    std::uint32_t compute_units = 0;
    std::size_t max_work_group_size = 0;
    std::size_t base_align_bytes = 4;  // CL_DEVICE_MEM_BASE_ADDR_ALIGN: where a sub-buffer may start
    // NVIDIA's extensions: the registers a work-group may use and the work-items of a warp
    // (cl_nv_device_attribute_query; 0 elsewhere), and whether the compiler takes -cl-nv-maxrregcount
    // (cl_nv_compiler_options).
    std::uint32_t registers_per_group = 0, warp_size = 0;
    int compute_capability = 0;  // NVIDIA's, major x 10 + minor (cl_nv_device_attribute_query; 0 elsewhere)
    bool register_cap_option = false;
    bool fp64 = false;  // cl_khr_fp64: doubles in kernels (the exact shape's glibc expf)
};

// Every device of every platform, in platform then device order. Throws Error when the ICD loader
// finds no platform at all.
std::vector<DeviceInfo> list_devices();

// The table `llama-cl devices` prints: one row per device, indexed "platform.device".
std::string format_device_table(const std::vector<DeviceInfo>& devices);

// One opened device with its context and in-order command queue. Copies share the same OpenCL
// objects (cl:: wrappers are reference counted), so passing a Device around is cheap.
class Device {
public:
    // Selectors are empty (no constraint), an index ("1") or a case-insensitive substring of the
    // platform or device name; device_sel may also be "platform.device" as format_device_table
    // shows it. Among the devices that match, the first GPU is taken when device_sel is empty,
    // otherwise (and when there is no GPU) the first match. No match: Error listing all devices.
    static Device open(const std::string& platform_sel, const std::string& device_sel,
                       bool profiling = false);

    // This device as an OpenCL 1.2 one uses it (no memory scopes): what an old device lacks, on this one.
    Device as_opencl_1_2() const;
    // This device as one with only `bytes` of local memory uses it (a small GPU's, on this one).
    Device with_local_memory(std::uint64_t bytes) const;

    const DeviceInfo& info() const { return info_; }
    cl::Context& context() { return context_; }
    cl::CommandQueue& queue() { return queue_; }
    cl::Device& device() { return device_; }
    const cl::Context& context() const { return context_; }
    const cl::CommandQueue& queue() const { return queue_; }
    const cl::Device& device() const { return device_; }

    // Builds all embedded kernels (kernels/*.cl, in file-name order) as one program. `options`
    // are extra compiler options such as "-DWG=64"; "-cl-std=" + `standard` is always added, and
    // LLAMACL_BUILD_OPTIONS last (build_options.hpp). A failed build throws Error("kernel build failed on
    // <device> ...") quoting the compiler's first error.
    cl::Program build_program(const std::string& options, const std::string& standard = "CL1.2") const;
    // The same for arbitrary OpenCL C source; build_program is this applied to the kernel files.
    cl::Program build_program_from_source(const std::string& source, const std::string& options,
                                          const std::string& standard = "CL1.2") const;

    // A device buffer of `bytes` bytes (no host pointer). A request above the device's maximum
    // allocation, or one the driver refuses, throws Error naming the device, `what` was being
    // allocated, the bytes requested, the global memory and the maximum allocation size.
    cl::Buffer allocate(std::size_t bytes, const std::string& what,
                        cl_mem_flags flags = CL_MEM_READ_WRITE) const;
    // A read-only buffer over `bytes` bytes of host memory that outlive it (CL_MEM_USE_HOST_PTR): on a CPU
    // device the kernels read them where they lie, nothing copied. Errors as allocate's.
    cl::Buffer wrap(const void* host, std::size_t bytes, const std::string& what) const;

    // The programs built on this device so far and the seconds their builds took (-v's startup line).
    struct Builds {
        int programs = 0;
        double seconds = 0;
    };
    Builds builds() const { return *builds_; }

private:
    Device(DeviceInfo info, cl::Device device, bool profiling);
    cl::Buffer buffer(std::size_t bytes, const std::string& what, cl_mem_flags flags, void* host) const;

    DeviceInfo info_;
    cl::Device device_;
    cl::Context context_;
    cl::CommandQueue queue_;
    std::shared_ptr<Builds> builds_ = std::make_shared<Builds>();  // shared by copies, as the CL objects are
};

// Host memory the device can DMA from and to directly ("pinned"): a CL_MEM_ALLOC_HOST_PTR buffer kept
// mapped for its whole life. Copies through it run several times faster than from pageable memory
// (about 55 vs 7.6 GB/s measured on an H200), so weight staging and logits readback go through one.
class PinnedBuffer {
public:
    PinnedBuffer(const Device& device, std::size_t bytes, const std::string& what);
    ~PinnedBuffer();
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    void* data() const { return host_; }
    std::size_t size() const { return bytes_; }

private:
    cl::CommandQueue queue_;
    cl::Buffer buffer_;
    void* host_ = nullptr;
    std::size_t bytes_ = 0;
};

}  // namespace llamacl
