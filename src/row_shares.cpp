#include "llamacl/row_shares.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace llamacl {

namespace {

// A CPU hint that the thread is spinning (frees the core's resources for its sibling hyperthread).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// How long a thread spins on a flag before it sleeps on it (a futex): a token's matmuls follow each
// other within microseconds, and a wake-up from sleep costs more than that; an idle process sleeps. A
// time, not a count of pauses (from 10 to 140 cycles each by CPU): a partner that a busy machine has
// descheduled must not cost its waiter milliseconds of spinning.
constexpr std::chrono::microseconds kSpinTime{100};

template <typename T>
void wait_while_equal(const std::atomic<T>& flag, T value) {
    const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 1;; i++) {
        if (flag.load(std::memory_order_acquire) != value) return;
        spin_pause();
        if (i % 32 == 0 && std::chrono::steady_clock::now() > deadline) break;
    }
    while (flag.load(std::memory_order_acquire) == value) flag.wait(value, std::memory_order_acquire);
}

// The CPUs this process may run on (taskset, a container's cpuset), as OpenMP counts them: more
// workers than that only wait for each other.
int usable_cpus() {
    cpu_set_t set;
    if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// One worker per usable CPU but the caller's, started on first use and joined at exit. A round is
// a generation: the caller publishes the task and bumps `generation_`; every worker runs its part (the
// caller takes part 0) and counts down `remaining_`.
class Workers {
public:
    static Workers& get() {
        static Workers workers(usable_cpus() - 1);
        return workers;
    }
    int parts() const { return static_cast<int>(threads_.size()) + 1; }

    // Part p of `rows` rows in `blocks` blocks of `align` takes blocks [p * blocks / parts, (p + 1) *
    // blocks / parts): shares within a block of each other.
    void run(ShareRef share, int rows, int align, int blocks) {
        const std::lock_guard<std::mutex> turn(run_mutex_);
        const Task task{share, rows, align, blocks, parts()};
        task_ = &task;
        remaining_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        task.part(0);
        for (int left = remaining_.load(std::memory_order_acquire); left != 0;
             left = remaining_.load(std::memory_order_acquire))
            wait_while_equal(remaining_, left);
    }

    ~Workers() {
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        for (std::thread& t : threads_) t.join();
    }

private:
    explicit Workers(int count) {
        for (int i = 0; i < count; i++) threads_.emplace_back([this, i] { loop(i + 1); });
    }

    void loop(int index) {
        for (std::uint32_t seen = 0;;) {
            wait_while_equal(generation_, seen);
            seen = generation_.load(std::memory_order_acquire);
            if (stop_) return;
            task_->part(index);
            if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
        }
    }

    struct Task {
        ShareRef share;
        int rows, align, blocks, parts;
        void part(int p) const {
            const auto bound = [&](int q) {
                return std::min(rows, static_cast<int>(static_cast<std::int64_t>(q) * blocks / parts) * align);
            };
            if (bound(p) < bound(p + 1)) share(bound(p), bound(p + 1));
        }
    };

    std::vector<std::thread> threads_;
    std::mutex run_mutex_;
    std::atomic<std::uint32_t> generation_{0};
    std::atomic<int> remaining_{0};
    const Task* task_ = nullptr;
    std::atomic<bool> stop_{false};
};

}  // namespace

void for_row_shares(int rows, int align, std::uint64_t work, ShareRef share) {
    if (rows <= 0) return;
    const int blocks = (rows + align - 1) / align;
    if (work < kMinSharedWork || blocks == 1) {
        share(0, rows);
        return;
    }
    Workers& workers = Workers::get();
    if (workers.parts() == 1) {
        share(0, rows);
        return;
    }
    workers.run(share, rows, align, blocks);
}

}  // namespace llamacl
