#pragma once
// What the host machine has to give: the CPU reference refuses a context it cannot hold, weight staging
// keeps a pinned mirror only where it fits, and a CPU device's buffers (its plan, bench's probes) are
// this process's memory; the reference's threads and a CPU device's token kernel take one CPU each.
#include <cstdint>

namespace llamacl {

// The machine's physical memory in bytes (0 when the system does not say).
std::uint64_t host_memory_bytes();
// Memory this process could still take: MemAvailable, capped by the cgroup's limit when there is one.
std::uint64_t available_host_memory_bytes();
// Address space this process could still map under its limit (ulimit -v), or UINT64_MAX with none.
std::uint64_t address_space_left_bytes();
// What this process can still allocate and touch: the smaller of the two above.
std::uint64_t allocatable_host_bytes();

// The CPUs this process may run on (taskset, a container's cpuset), as OpenMP counts them.
int usable_cpus();
// Whether this process may run on every online CPU.
bool every_cpu_usable();

}  // namespace llamacl
