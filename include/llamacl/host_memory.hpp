#pragma once
// What the host machine has to give: the CPU reference refuses a context it cannot hold, weight staging
// keeps a pinned mirror only where it fits, and a CPU device's buffers (its plan, bench's probes) are
// this process's memory; the reference's threads and a CPU device's token kernel take one CPU each.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace llamacl {

// The machine's physical memory in bytes (0 when the system does not say).
std::uint64_t host_memory_bytes();
// Memory this process could still take: MemAvailable, capped by the cgroup's limit when there is one.
std::uint64_t available_host_memory_bytes();
// Address space this process could still map under its limit (ulimit -v), or UINT64_MAX with none.
std::uint64_t address_space_left_bytes();
// What this process can still allocate and touch: the smaller of the two above.
std::uint64_t allocatable_host_bytes();

// The CPUs this process may run on (taskset, a container's cpuset), as OpenMP counts them, and no more
// than a container's CPU quota allows (threads beyond it would wait out each other's time slices).
int usable_cpus();
// Whether the affinity mask holds every online CPU (whatever a quota allows).
bool every_cpu_usable();
// Whole CPUs a CPU bandwidth limit of `quota` µs each `period` µs allows, rounded up; 0 where there is
// no limit (a quota of -1).
int cpus_of_quota(long long quota, long long period);

// n floats that read as zero, from calloc: a large block comes from the system already zeroed and takes
// memory only as its pages are first written, so a cache sized for a long context holds what the positions
// a run reaches wrote, not the whole context up front. Throws std::bad_alloc where calloc fails.
class ZeroedFloats {
public:
    explicit ZeroedFloats(std::size_t n);
    float* data() { return floats_.get(); }
    const float* data() const { return floats_.get(); }
    std::size_t size() const { return size_; }

private:
    struct Free {
        void operator()(float* p) const { std::free(p); }
    };
    std::unique_ptr<float[], Free> floats_;
    std::size_t size_;
};

// n bytes as the allocator gives them, never zeroed: whoever makes one writes every byte (a weight
// conversion, a synthetic model's image), so that the pages of a large block are first touched by the
// threads that fill it, not by one thread zeroing it beforehand.
class HostBytes {
public:
    explicit HostBytes(std::size_t n) : bytes_(new std::byte[n > 0 ? n : 1]), size_(n) {}
    std::byte* data() { return bytes_.get(); }
    const std::byte* data() const { return bytes_.get(); }
    std::size_t size() const { return size_; }

private:
    std::unique_ptr<std::byte[]> bytes_;
    std::size_t size_;
};

}  // namespace llamacl
