#include "llamacl/device.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string_view>
#include <utility>

#include "llamacl/build_options.hpp"
#include "llamacl/embedded_kernels.hpp"
#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/mapped_file.hpp"
#include "llamacl/progress.hpp"

namespace llamacl {

std::string cl_error_name(cl_int code) {
    switch (code) {
        case CL_SUCCESS: return "CL_SUCCESS";
        case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
        case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
        case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
        case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
        case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
        case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
        case CL_PROFILING_INFO_NOT_AVAILABLE: return "CL_PROFILING_INFO_NOT_AVAILABLE";
        case CL_MEM_COPY_OVERLAP: return "CL_MEM_COPY_OVERLAP";
        case CL_IMAGE_FORMAT_MISMATCH: return "CL_IMAGE_FORMAT_MISMATCH";
        case CL_IMAGE_FORMAT_NOT_SUPPORTED: return "CL_IMAGE_FORMAT_NOT_SUPPORTED";
        case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
        case CL_MAP_FAILURE: return "CL_MAP_FAILURE";
        case CL_MISALIGNED_SUB_BUFFER_OFFSET: return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
        case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
        case CL_COMPILE_PROGRAM_FAILURE: return "CL_COMPILE_PROGRAM_FAILURE";
        case CL_LINKER_NOT_AVAILABLE: return "CL_LINKER_NOT_AVAILABLE";
        case CL_LINK_PROGRAM_FAILURE: return "CL_LINK_PROGRAM_FAILURE";
        case CL_DEVICE_PARTITION_FAILED: return "CL_DEVICE_PARTITION_FAILED";
        case CL_KERNEL_ARG_INFO_NOT_AVAILABLE: return "CL_KERNEL_ARG_INFO_NOT_AVAILABLE";
        case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
        case CL_INVALID_DEVICE_TYPE: return "CL_INVALID_DEVICE_TYPE";
        case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
        case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
        case CL_INVALID_CONTEXT: return "CL_INVALID_CONTEXT";
        case CL_INVALID_QUEUE_PROPERTIES: return "CL_INVALID_QUEUE_PROPERTIES";
        case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
        case CL_INVALID_HOST_PTR: return "CL_INVALID_HOST_PTR";
        case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
        case CL_INVALID_IMAGE_FORMAT_DESCRIPTOR: return "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR";
        case CL_INVALID_IMAGE_SIZE: return "CL_INVALID_IMAGE_SIZE";
        case CL_INVALID_SAMPLER: return "CL_INVALID_SAMPLER";
        case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
        case CL_INVALID_BUILD_OPTIONS: return "CL_INVALID_BUILD_OPTIONS";
        case CL_INVALID_PROGRAM: return "CL_INVALID_PROGRAM";
        case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
        case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
        case CL_INVALID_KERNEL_DEFINITION: return "CL_INVALID_KERNEL_DEFINITION";
        case CL_INVALID_KERNEL: return "CL_INVALID_KERNEL";
        case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
        case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
        case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
        case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
        case CL_INVALID_WORK_DIMENSION: return "CL_INVALID_WORK_DIMENSION";
        case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
        case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
        case CL_INVALID_GLOBAL_OFFSET: return "CL_INVALID_GLOBAL_OFFSET";
        case CL_INVALID_EVENT_WAIT_LIST: return "CL_INVALID_EVENT_WAIT_LIST";
        case CL_INVALID_EVENT: return "CL_INVALID_EVENT";
        case CL_INVALID_OPERATION: return "CL_INVALID_OPERATION";
        case CL_INVALID_GL_OBJECT: return "CL_INVALID_GL_OBJECT";
        case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
        case CL_INVALID_MIP_LEVEL: return "CL_INVALID_MIP_LEVEL";
        case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
        case CL_INVALID_PROPERTY: return "CL_INVALID_PROPERTY";
        case CL_INVALID_IMAGE_DESCRIPTOR: return "CL_INVALID_IMAGE_DESCRIPTOR";
        case CL_INVALID_COMPILER_OPTIONS: return "CL_INVALID_COMPILER_OPTIONS";
        case CL_INVALID_LINKER_OPTIONS: return "CL_INVALID_LINKER_OPTIONS";
        case CL_INVALID_DEVICE_PARTITION_COUNT: return "CL_INVALID_DEVICE_PARTITION_COUNT";
        // The codes below are not defined by cl.h when targeting OpenCL 1.2, but a newer driver
        // or the ICD loader can still return them, so they are matched by value.
        case -69: return "CL_INVALID_PIPE_SIZE";
        case -70: return "CL_INVALID_DEVICE_QUEUE";
        case -71: return "CL_INVALID_SPEC_ID";
        case -72: return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
        case -1000: return "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR";
        case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
        case -1057: return "CL_DEVICE_PARTITION_FAILED_EXT";
        case -1058: return "CL_INVALID_PARTITION_COUNT_EXT";
        case -1059: return "CL_INVALID_PARTITION_NAME_EXT";
        case -1121: return "CL_CONTEXT_TERMINATED_KHR";
        default: return "CL_UNKNOWN_ERROR(" + std::to_string(code) + ")";
    }
}

std::string describe(const cl::Error& e) {
    // CLHPP reports the failing C function as what(), or "empty" when it did not record one.
    const std::string call = e.what();
    return (call.empty() || call == "empty" ? std::string("OpenCL call") : call) + " failed: " +
           cl_error_name(e.err());
}

namespace {

// Drivers pad their strings: Intel prefixes CPU names with spaces, some leave NULs at the end.
std::string trimmed(const std::string& s) {
    const auto keep = [](char c) { return c != '\0' && !std::isspace(static_cast<unsigned char>(c)); };
    const auto first = std::find_if(s.begin(), s.end(), keep);
    const auto last = std::find_if(s.rbegin(), s.rend(), keep).base();
    return first < last ? std::string(first, last) : std::string();
}

// What a driver's compiler prints on the process's stderr itself during a build (PoCL's clang: "1 error
// generated."), held back so that nothing precedes llama-cl's own line: a failed build's Error quotes its
// first error where the log has none, a successful build passes it on. While held, whatever the process writes to stderr is held too.
class HeldStderr {
public:
    HeldStderr() {
        std::fflush(stderr);
        file_ = std::tmpfile();
        saved_ = file_ ? ::dup(STDERR_FILENO) : -1;
        if (saved_ >= 0) set_sigbus_report_fd(saved_);  // (a truncated model's line is not the build's output)
        if (saved_ >= 0 && ::dup2(::fileno(file_), STDERR_FILENO) < 0) release();
    }
    ~HeldStderr() { release(); }
    HeldStderr(const HeldStderr&) = delete;
    HeldStderr& operator=(const HeldStderr&) = delete;

    // Puts stderr back and returns what was written to it meanwhile (nothing where it could not be held).
    std::string release() {
        std::string text;
        if (saved_ >= 0) {
            std::fflush(stderr);
            ::dup2(saved_, STDERR_FILENO);
            set_sigbus_report_fd(STDERR_FILENO);
            ::close(saved_);
            saved_ = -1;
            std::rewind(file_);
            char buffer[4096];
            for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file_)) > 0;) text.append(buffer, n);
        }
        if (file_) std::fclose(std::exchange(file_, nullptr));
        return text;
    }

private:
    std::FILE* file_ = nullptr;
    int saved_ = -1;
};

// The compiler's first error in its output: the first line that names one and is not their count ("1
// error generated."), else the first line.
std::string first_error(const std::string& output) {
    std::istringstream lines(output);
    std::string first;
    for (std::string line; std::getline(lines, line);) {
        line = trimmed(line);
        if (first.empty()) first = line;
        if (line.find("error") != std::string::npos && !line.ends_with(" generated.")) return line;
    }
    return first;
}

// CL_DEVICE_VERSION is "OpenCL MAJOR.MINOR VENDOR-SPECIFIC": memory scopes from 2.0 on.
std::string scopes_standard(const std::string& version) {
    constexpr std::string_view prefix = "OpenCL ";
    int major = 0;
    if (version.starts_with(prefix))
        std::from_chars(version.data() + prefix.size(), version.data() + version.size(), major);
    return major >= 3 ? "CL3.0" : major == 2 ? "CL2.0" : "";
}

std::string lowercase(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

// "3.50 GiB": memory sizes as a user reads them.
std::string human_bytes(std::uint64_t bytes) {
    static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < std::size(units)) {
        value /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
    return text;
}

// "2147483648 bytes (2.00 GiB)": exact for the record, readable for the user.
std::string exact_bytes(std::uint64_t bytes) {
    return std::to_string(bytes) + " bytes (" + human_bytes(bytes) + ")";
}

// A selector that is all digits is an index; anything else is not.
bool parse_index(const std::string& s, int& index) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
        return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), index);
    return ec == std::errc() && end == s.data() + s.size();
}

// Empty matches everything; an index matches that position; otherwise a case-insensitive substring.
bool selector_matches(const std::string& selector, int index, const std::string& name) {
    if (selector.empty()) return true;
    int wanted = 0;
    if (parse_index(selector, wanted)) return wanted == index;
    return lowercase(name).find(lowercase(selector)) != std::string::npos;
}

bool device_selector_matches(const std::string& selector, const DeviceInfo& info) {
    // "p.d", as format_device_table prints it, names exactly one device.
    if (const auto dot = selector.find('.'); dot != std::string::npos) {
        int p = 0, d = 0;
        if (parse_index(selector.substr(0, dot), p) && parse_index(selector.substr(dot + 1), d))
            return p == info.platform_index && d == info.device_index;
    }
    return selector_matches(selector, info.device_index, info.name);
}

std::string device_label(const DeviceInfo& info) {
    return std::to_string(info.platform_index) + "." + std::to_string(info.device_index) + " " + info.name;
}

std::string device_type(cl_device_type type) {
    // The type is a bit field (a GPU may also carry CL_DEVICE_TYPE_DEFAULT); the first kind wins.
    if (type & CL_DEVICE_TYPE_GPU) return "GPU";
    if (type & CL_DEVICE_TYPE_CPU) return "CPU";
    if (type & CL_DEVICE_TYPE_ACCELERATOR) return "ACCELERATOR";
    return "OTHER";
}

struct FoundDevice {
    DeviceInfo info;
    cl::Device device;
};

// The nearest existing directory at or above `path` can take a new entry, so a cache could be made there.
bool can_create(std::filesystem::path path) {
    std::error_code ec;
    while (!std::filesystem::exists(path, ec)) {
        if (!path.has_relative_path()) return false;
        path = path.parent_path();
    }
    return std::filesystem::is_directory(path, ec) && ::access(path.c_str(), W_OK | X_OK) == 0;
}

// PoCL compiles kernels into a cache directory ($POCL_CACHE_DIR if it exists, else $XDG_CACHE_HOME/pocl
// or $HOME/.cache/pocl) and reports no devices at all when it cannot create it. Where the default is
// unusable (no $HOME, a read-only one), POCL_CACHE_DIR is pointed at a directory of this user's under
// $TMPDIR or /tmp instead. Runs before the first OpenCL call; a POCL_CACHE_DIR the user set is kept, unless
// empty (PoCL aborts on one: treated as unset) or not a directory it can write to or create (every kernel
// build would fail, blaming the kernels).
void ensure_pocl_cache_dir() {
    if (const char* set = std::getenv("POCL_CACHE_DIR")) {
        std::error_code ec;
        const auto refuse = [&](const char* why) {
            return Error(std::string("POCL_CACHE_DIR (") + set + ") " + why +
                         ": PoCL keeps its compiled kernels there; point it at a writable directory or unset it");
        };
        if (*set && std::filesystem::exists(set, ec) && !std::filesystem::is_directory(set, ec))
            throw refuse("is not a directory");
        if (*set && !can_create(set)) throw refuse("is not writable");
        if (*set) return;
        ::unsetenv("POCL_CACHE_DIR");
    }
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    const std::filesystem::path pocl_default = xdg && *xdg ? std::filesystem::path(xdg) / "pocl"
                                               : home       ? std::filesystem::path(home) / ".cache/pocl"
                                                            : std::filesystem::path("/tmp/pocl");
    if (can_create(pocl_default)) return;
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path dir =
        std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("llama-cl-pocl-cache-" + std::to_string(::getuid()));
    ::mkdir(dir.c_str(), 0700);
    // PoCL loads compiled kernels from the cache: only a directory this user owns and no one else can
    // write to will do (another user could have made the name first).
    struct stat st {};
    if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid() && (st.st_mode & 022) == 0)
        ::setenv("POCL_CACHE_DIR", dir.c_str(), 0);
}

// PoCL's worker threads move between CPUs unless POCL_AFFINITY pins each to one. The CPU token kernel's
// work-groups spin at its grid barriers, and two threads on one CPU wait out each other's time slices
// (docs/benchmarks.md). PoCL pins to CPUs 0 .. n-1 whatever this process's affinity mask says, so only
// where the mask holds every CPU; a POCL_AFFINITY the user set is kept. Runs before the first OpenCL call.
void pin_pocl_threads() {
    if (every_cpu_usable()) ::setenv("POCL_AFFINITY", "1", 0);
}

std::vector<FoundDevice> enumerate_devices() {
    static std::once_flag pocl_once;
    std::call_once(pocl_once, [] {
        ensure_pocl_cache_dir();
        pin_pocl_threads();
    });
    // Counting through the C API first: with zero platforms CLHPP's Platform::get would call
    // clGetPlatformIDs with no output at all and report a misleading CL_INVALID_VALUE.
    cl_uint platform_count = 0;
    const cl_int status = clGetPlatformIDs(0, nullptr, &platform_count);
    if (status == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (status == CL_SUCCESS && platform_count == 0))
        throw Error("no OpenCL platform found: the ICD loader (libOpenCL) found no driver; install one "
                    "(e.g. apt install pocl-opencl-icd for CPUs), or " + cpu_reference_remedy());
    if (status != CL_SUCCESS)
        throw Error("cannot list OpenCL platforms: clGetPlatformIDs failed: " + cl_error_name(status));

    std::vector<FoundDevice> found;
    std::vector<cl::Platform> platforms;
    try {
        cl::Platform::get(&platforms);
        for (std::size_t p = 0; p < platforms.size(); ++p) {
            std::vector<cl::Device> devices;
            platforms[p].getDevices(CL_DEVICE_TYPE_ALL, &devices);  // none: empty, not an error
            for (std::size_t d = 0; d < devices.size(); ++d) {
                const cl::Device& dev = devices[d];
                DeviceInfo info;
                info.platform_index = static_cast<int>(p);
                info.device_index = static_cast<int>(d);
                info.platform_name = trimmed(platforms[p].getInfo<CL_PLATFORM_NAME>());
                info.name = trimmed(dev.getInfo<CL_DEVICE_NAME>());
                info.vendor = trimmed(dev.getInfo<CL_DEVICE_VENDOR>());
                info.version = trimmed(dev.getInfo<CL_DEVICE_VERSION>());
                info.scopes_standard = scopes_standard(info.version);
                info.driver_version = trimmed(dev.getInfo<CL_DRIVER_VERSION>());
                const cl_device_type type = dev.getInfo<CL_DEVICE_TYPE>();
                info.type = device_type(type);
                info.is_cpu = info.type == "CPU";
                info.global_mem_bytes = dev.getInfo<CL_DEVICE_GLOBAL_MEM_SIZE>();
                info.max_alloc_bytes = dev.getInfo<CL_DEVICE_MAX_MEM_ALLOC_SIZE>();
                info.local_mem_bytes = dev.getInfo<CL_DEVICE_LOCAL_MEM_SIZE>();
                info.global_cache_bytes = dev.getInfo<CL_DEVICE_GLOBAL_MEM_CACHE_SIZE>();
                info.compute_units = dev.getInfo<CL_DEVICE_MAX_COMPUTE_UNITS>();
                info.max_work_group_size = dev.getInfo<CL_DEVICE_MAX_WORK_GROUP_SIZE>();
                info.base_align_bytes = std::max<std::size_t>(4, dev.getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8);
                const std::string extensions = dev.getInfo<CL_DEVICE_EXTENSIONS>();
                if (extensions.find("cl_nv_device_attribute_query") != std::string::npos) {
                    info.registers_per_group = dev.getInfo<CL_DEVICE_REGISTERS_PER_BLOCK_NV>();
                    info.warp_size = dev.getInfo<CL_DEVICE_WARP_SIZE_NV>();
                    info.compute_capability = static_cast<int>(dev.getInfo<CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV>() * 10 +
                                                               dev.getInfo<CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV>());
                }
                info.register_cap_option = extensions.find("cl_nv_compiler_options") != std::string::npos;
                info.fp64 = extensions.find("cl_khr_fp64") != std::string::npos;
                found.push_back({std::move(info), dev});
            }
        }
    } catch (const cl::Error& e) {
        // A GPU driver reserves far more address space than it uses: under ulimit -v it may not start.
        throw Error("cannot query OpenCL devices: " + describe(e) +
                    (e.err() == CL_OUT_OF_HOST_MEMORY
                         ? " (a driver could not start within this process's memory: raise ulimit -v, or " +
                               cpu_reference_remedy() + ")"
                         : ""));
    }
    if (found.empty()) {
        std::string names;
        for (const cl::Platform& platform : platforms)
            names += (names.empty() ? "" : ", ") + trimmed(platform.getInfo<CL_PLATFORM_NAME>());
        throw Error("no OpenCL device found: the platforms (" + names + ") report none; PoCL does so when it "
                    "cannot create its kernel cache (set POCL_CACHE_DIR to a writable directory), other drivers "
                    "when the hardware or its permissions are missing; or " + cpu_reference_remedy());
    }
    return found;
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
    std::vector<DeviceInfo> infos;
    for (auto& found : enumerate_devices()) infos.push_back(std::move(found.info));
    return infos;
}

std::string format_device_table(const std::vector<DeviceInfo>& devices) {
    std::vector<std::vector<std::string>> rows = {
        {"#", "name", "vendor", "OpenCL", "type", "global mem", "max alloc", "compute units"}};
    for (const DeviceInfo& d : devices) {
        // CL_DEVICE_VERSION is "OpenCL <major.minor> <vendor text>"; the vendor text can be long.
        std::string version = d.version;
        if (version.rfind("OpenCL ", 0) == 0) version = version.substr(7, version.find(' ', 7) - 7);
        rows.push_back({std::to_string(d.platform_index) + "." + std::to_string(d.device_index), d.name,
                        d.vendor, version, d.type, human_bytes(d.global_mem_bytes),
                        human_bytes(d.max_alloc_bytes), std::to_string(d.compute_units)});
    }
    std::vector<std::size_t> widths(rows[0].size(), 0);
    for (const auto& row : rows)
        for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    std::string table;
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t c = 0; c < row.size(); ++c) {
            line += row[c];
            if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
        }
        table += line + "\n";
    }
    return table;
}

Device::Device(DeviceInfo info, cl::Device device, bool profiling)
    : info_(std::move(info)),
      device_(std::move(device)),
      context_(device_),
      queue_(context_, device_, cl_command_queue_properties{profiling ? CL_QUEUE_PROFILING_ENABLE : 0u}) {}

Device Device::open(const std::string& platform_sel, const std::string& device_sel, bool profiling) {
    const std::vector<FoundDevice> all = enumerate_devices();
    std::vector<const FoundDevice*> matches;
    for (const FoundDevice& f : all)
        if (selector_matches(platform_sel, f.info.platform_index, f.info.platform_name) &&
            device_selector_matches(device_sel, f.info))
            matches.push_back(&f);

    if (matches.empty()) {
        std::string wanted, available;
        if (!platform_sel.empty()) wanted += " platform \"" + platform_sel + "\"";
        if (!device_sel.empty()) wanted += std::string(wanted.empty() ? "" : ",") + " device \"" + device_sel + "\"";
        for (const FoundDevice& f : all)
            available += (available.empty() ? "" : "; ") + device_label(f.info) + " (" + f.info.type + ", " +
                         f.info.platform_name + ")";
        throw Error("no OpenCL device matches" + wanted + "; available: " + available);
    }

    // Without a device choice prefer a GPU: that is what a user with one expects to be used.
    const FoundDevice* chosen = matches.front();
    if (device_sel.empty()) {
        const auto gpu = std::find_if(matches.begin(), matches.end(),
                                      [](const FoundDevice* f) { return f->info.type == "GPU"; });
        if (gpu != matches.end()) chosen = *gpu;
    }
    try {
        return Device(chosen->info, chosen->device, profiling);
    } catch (const cl::Error& e) {
        throw Error("cannot open OpenCL device " + device_label(chosen->info) + ": " + describe(e));
    }
}

cl::Program Device::build_program(const std::string& options, const std::string& standard) const {
    // embedded_kernels() is in program order. A #line before each file makes clang-based
    // compilers (PoCL) report diagnostics as copy.cl:3 rather than a line of the concatenation;
    // NVIDIA's compiler ignores it and still shows the offending source line, which is enough.
    std::string source;
    for (const EmbeddedKernel& k : embedded_kernels()) {
        source += "#line 1 \"" + std::string(k.file) + "\"\n";
        source += k.source;
        source += "\n";
    }
    return build_program_from_source(source, options, standard);
}

cl::Program Device::build_program_from_source(const std::string& source, const std::string& options,
                                              const std::string& standard) const {
    // -w: a compiler's warnings go nowhere useful (PoCL's clang prints their count on the user's stderr, for
    // its own builtins' float16 calling convention); a failed build's log still carries its errors.
    const std::string extra = user_build_options();
    const std::string all_options = "-cl-std=" + standard + " -w" + (options.empty() ? "" : " " + options) +
                                    (extra.empty() ? "" : " " + extra);
    cl::Program program;
    const ProgressLine progress("compiling kernels for " + info_.name + " (the driver caches them for the next run)");
    const auto start = std::chrono::steady_clock::now();
    HeldStderr held;
    try {
        program = cl::Program(context_, source);
        program.build(device_, all_options.c_str());
        guard_sigbus_first();  // PoCL's LLVM may have put its own handler in front while building
        builds_->programs++;
        builds_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fputs(held.release().c_str(), stderr);
        return program;
    } catch (const cl::Error& e) {
        std::string log;
        try {
            log = program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(device_);
        } catch (const cl::Error&) {
            // No log to add (the program object was never created): the error code says enough.
        }
        const std::string error = first_error(log + "\n" + held.release());
        throw Error("kernel build failed on " + info_.name + ": " + describe(e) + " (options \"" + all_options +
                    "\"" + (extra.empty() ? "" : ", LLAMACL_BUILD_OPTIONS among them") + ")" +
                    (error.empty() ? "" : ": " + error) +
                    (extra.empty() ? "; try --work-shape exact or cpu, update the driver, or use --backend cpu, and "
                                     "please report it with llama-cl devices"
                                   : "; check LLAMACL_BUILD_OPTIONS' options"));
    }
}

Device Device::as_opencl_1_2() const {
    Device device = *this;
    device.info_.version = "OpenCL 1.2 (" + info_.version + ", used as 1.2)";
    device.info_.scopes_standard.clear();
    return device;
}

Device Device::with_local_memory(std::uint64_t bytes) const {
    Device device = *this;
    device.info_.local_mem_bytes = bytes;
    return device;
}

cl::Buffer Device::allocate(std::size_t bytes, const std::string& what, cl_mem_flags flags) const {
    return buffer(bytes, what, flags, nullptr);
}

cl::Buffer Device::wrap(const void* host, std::size_t bytes, const std::string& what) const {
    // (Read-only: the runtime never writes through the pointer.)
    return buffer(bytes, what, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, const_cast<void*>(host));
}

cl::Buffer Device::buffer(std::size_t bytes, const std::string& what, cl_mem_flags flags, void* host) const {
    const auto failure = [&](const std::string& reason) {
        return Error("cannot allocate " + what + " on " + info_.name + ": " + exact_bytes(bytes) +
                     " requested, " + reason + " (global memory " + exact_bytes(info_.global_mem_bytes) +
                     ", max allocation " + exact_bytes(info_.max_alloc_bytes) + ")");
    };
    // Drivers differ on what they do past the limit (some succeed and fail later), so check first.
    if (bytes > info_.max_alloc_bytes) throw failure("more than the device allows in one buffer");
    try {
        // NVIDIA and some other drivers allocate lazily: success here does not guarantee memory,
        // and a shortage may first surface as CL_MEM_OBJECT_ALLOCATION_FAILURE or
        // CL_OUT_OF_RESOURCES on the first command that uses the buffer; callers handle that there.
        return cl::Buffer(context_, flags, bytes, host);
    } catch (const cl::Error& e) {
        const cl_int code = e.err();
        const bool out_of_memory =
            code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES || code == CL_OUT_OF_HOST_MEMORY;
        throw Error(failure(describe(e)).what() +
                    (out_of_memory ? "; the device is out of memory: stage fewer layers at once with a smaller "
                                     "--layers-per-offload (--verbose shows the plan), or " + cpu_reference_remedy()
                                   : std::string()));
    }
}

PinnedBuffer::PinnedBuffer(const Device& device, std::size_t bytes, const std::string& what)
    : queue_(device.queue()),
      buffer_(device.allocate(bytes, what, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR)),
      bytes_(bytes) {
    try {
        host_ = queue_.enqueueMapBuffer(buffer_, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes);
    } catch (const cl::Error& e) {
        throw Error("cannot map pinned host memory for " + what + " on " + device.info().name + ": " + describe(e));
    }
}

PinnedBuffer::~PinnedBuffer() {
    try {
        queue_.enqueueUnmapMemObject(buffer_, host_);
        queue_.finish();
    } catch (const cl::Error&) {
        // Tearing down: the context is going away with the buffer, so there is nothing left to recover.
    }
}

}  // namespace llamacl

