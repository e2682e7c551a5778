#include "llamacl/mapped_file.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "llamacl/atomic_file.hpp"
#include "llamacl/error.hpp"

namespace llamacl {

namespace {

// The handler may run on any thread (an OpenCL driver's copy reads the mapping too) at any moment, so
// it reads only this fixed table: a slot is published (state 2) after its fields are written, and
// retired (state 0) before its mapping goes away. Messages are formed here, ahead of any signal.
struct Guard {
    std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live
    const std::byte* begin = nullptr;
    std::size_t bytes = 0;
    char message[1024] = {};
    std::size_t length = 0;
};
constexpr int kGuards = 64;
Guard guards[kGuards];
struct sigaction previous_action {};
std::atomic<int> report_fd{STDERR_FILENO};  // set_sigbus_report_fd

void on_sigbus(int signal, siginfo_t* info, void* context) {
    // Sent, not a fault (si_code <= 0), by this process: a handler installed over this one passing a fault
    // on with raise() once it has put this one back (LLVM's crash recovery does, while PoCL compiles). The
    // access faults again when that handler returns, into this one with its address.
    if (info->si_code <= 0 && info->si_pid == ::getpid()) return;
    const auto* address = static_cast<const std::byte*>(info->si_addr);
    for (Guard& g : guards) {
        if (g.state.load(std::memory_order_acquire) != 2) continue;
        if (address >= g.begin && address < g.begin + g.bytes) {
            // Async-signal-safe: unlinks, one write(2) and _exit(1). Threads that fault at the same time (the
            // main thread and a driver's copy) wait for the first one's exit, so the message comes once.
            static std::atomic<bool> reporting{false};
            if (reporting.exchange(true))
                for (;;) ::pause();
            remove_unfinished_outputs();  // quantize's output, bench's and check's plots
            [[maybe_unused]] const ssize_t written = ::write(report_fd.load(), g.message, g.length);
            ::_exit(1);
        }
    }
    // Not one of ours: restore whoever handled SIGBUS before and let the access fault again.
    ::sigaction(signal, &previous_action, nullptr);
    (void)context;
}

int add_guard(const std::byte* begin, std::size_t bytes, const std::string& path) {
    for (int i = 0; i < kGuards; ++i) {
        int free = 0;
        if (!guards[i].state.compare_exchange_strong(free, 1)) continue;
        Guard& g = guards[i];
        const std::string text = "llama-cl: " + printable(path) +
                                 ": the file shrank while in use (truncated or overwritten); leave it unchanged "
                                 "while llama-cl runs, and run again";
        g.length = std::min(text.size(), sizeof g.message - 1);
        std::memcpy(g.message, text.data(), g.length);
        g.message[g.length++] = '\n';
        g.begin = begin;
        g.bytes = bytes;
        g.state.store(2, std::memory_order_release);
        return i;
    }
    return -1;
}

}  // namespace

void guard_sigbus_first() {
    static std::mutex mutex;
    const std::lock_guard lock(mutex);
    struct sigaction current {};
    ::sigaction(SIGBUS, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus) return;
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &previous_action);
}

void set_sigbus_report_fd(int fd) { report_fd.store(fd); }

MappedFile::MappedFile(int fd, std::size_t bytes, const std::string& path) : bytes_(bytes) {
    if (bytes == 0) return;
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) throw Error(path + ": cannot memory-map checkpoint: " + std::strerror(errno));
    map_ = map;
    guard_sigbus_first();
    guard_ = add_guard(data(), bytes, path);
}

MappedFile::~MappedFile() {
    if (guard_ >= 0) guards[guard_].state.store(0, std::memory_order_release);
    if (map_) ::munmap(map_, bytes_);
}

}  // namespace llamacl
