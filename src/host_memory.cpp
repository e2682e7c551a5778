#include "llamacl/host_memory.hpp"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <new>
#include <string>
#include <system_error>
#include <thread>

namespace llamacl {

namespace {

// The first number in `path` (0 when unreadable or not a number, as cgroup v2 writes "max").
std::uint64_t read_number(const char* path, const char* key = nullptr) {
    std::ifstream in(path);
    std::string word;
    if (key) {
        while (in >> word && word != key) {
        }
    }
    std::uint64_t value = 0;
    return in >> value ? value : 0;
}

}  // namespace

std::uint64_t host_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_size <= 0) return 0;
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

std::uint64_t available_host_memory_bytes() {
    std::uint64_t available = read_number("/proc/meminfo", "MemAvailable:") * 1024;
    if (available == 0) available = host_memory_bytes();
    // In a container the cgroup's limit binds before the machine's memory does.
    const std::uint64_t limit = read_number("/sys/fs/cgroup/memory.max");
    const std::uint64_t used = read_number("/sys/fs/cgroup/memory.current");
    if (limit > 0) available = std::min(available, limit > used ? limit - used : 0);
    return available;
}

std::uint64_t address_space_left_bytes() {
    rlimit limit{};
    if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
        return std::numeric_limits<std::uint64_t>::max();
    const long page_size = sysconf(_SC_PAGE_SIZE);
    const std::uint64_t mapped = read_number("/proc/self/statm") * static_cast<std::uint64_t>(std::max(page_size, 1L));
    return limit.rlim_cur > mapped ? limit.rlim_cur - mapped : 0;
}

std::uint64_t allocatable_host_bytes() { return std::min(address_space_left_bytes(), available_host_memory_bytes()); }

int cpus_of_quota(long long quota, long long period) {
    if (quota <= 0 || period <= 0) return 0;
    return static_cast<int>(std::min<long long>((quota + period - 1) / period, std::numeric_limits<int>::max()));
}

namespace {

// The CPUs of the affinity mask.
int affinity_cpus() {
    cpu_set_t set;
    if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The CPUs the container's CPU bandwidth limit allows, 0 with no limit: cgroup v2's cpu.max ("QUOTA
// PERIOD", QUOTA "max" for none), else v1's cfs_quota_us (-1 for none) and cfs_period_us.
int quota_cpus() {
    std::string quota;
    long long period = 0;
    if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2) {
        if (!(v2 >> quota >> period)) return 0;
    } else {
        std::ifstream quota_in("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), period_in("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
        if (!(quota_in >> quota && period_in >> period)) return 0;
    }
    long long q = 0;  // "max" is not a number: no limit
    const auto [end, ec] = std::from_chars(quota.data(), quota.data() + quota.size(), q);
    return ec == std::errc{} && end == quota.data() + quota.size() ? cpus_of_quota(q, period) : 0;
}

}  // namespace

int usable_cpus() {
    const int affinity = affinity_cpus(), quota = quota_cpus();
    return quota > 0 ? std::min(affinity, quota) : affinity;
}

bool every_cpu_usable() { return affinity_cpus() >= sysconf(_SC_NPROCESSORS_ONLN); }

ZeroedFloats::ZeroedFloats(std::size_t n)
    : floats_(static_cast<float*>(std::calloc(n > 0 ? n : 1, sizeof(float)))), size_(n) {
    if (!floats_) throw std::bad_alloc();
}

}  // namespace llamacl
