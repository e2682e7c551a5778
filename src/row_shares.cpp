#include "llamacl/row_shares.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "llamacl/host_memory.hpp"

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

// One worker per usable CPU (more only wait for each other) but the caller's, started on first use and
// joined at exit. A round is a generation: the caller publishes the task, opens `state_` and bumps
// `generation_`. Part p (the caller is part 0, worker i part i) owns an even share of the blocks and
// claims it in chunks from its counter, front to back, then claims what is left of the other parts'
// shares: a worker the machine has not scheduled leaves its share to the others instead of holding the
// round up. The caller then closes the round and waits for the workers that joined it to leave: only
// then may the task go out of scope.
class Workers {
public:
    static Workers& get() {
        static Workers workers(usable_cpus() - 1);
        return workers;
    }
    int parts() const { return static_cast<int>(threads_.size()) + 1; }

    void run(ShareRef share, int rows, int align, int blocks) {
        const std::lock_guard<std::mutex> turn(run_mutex_);
        const int parts = this->parts();
        // Chunks of half a share: a straggler's second half can be taken over.
        const Task task{share, rows, align, blocks, parts, std::max(1, blocks / (2 * parts)), next_.get()};
        for (int p = 0; p < parts; p++) next_[p].value.store(task.share_begin(p), std::memory_order_relaxed);
        task_ = &task;
        state_.store(0, std::memory_order_release);  // open, nobody in it
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        task.claim(0);
        for (std::uint32_t s = state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed; s != kClosed;
             s = state_.load(std::memory_order_acquire))
            wait_while_equal(state_, s);
    }

    ~Workers() {
        stop_ = true;
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        for (std::thread& t : threads_) t.join();
    }

private:
    static constexpr std::uint32_t kClosed = 1u << 31;  // state_: this bit, and the count of workers in the round

    // Each counter on a cache line of its own: one part's claims must not evict another's.
    struct alignas(64) Counter {
        std::atomic<int> value{0};
    };

    explicit Workers(int count) : next_(std::make_unique<Counter[]>(static_cast<std::size_t>(count) + 1)) {
        for (int i = 0; i < count; i++) threads_.emplace_back([this, i] { loop(i + 1); });
    }

    void loop(int part) {
        for (std::uint32_t seen = 0;;) {
            wait_while_equal(generation_, seen);
            seen = generation_.load(std::memory_order_acquire);
            if (stop_) return;
            if (!join()) continue;  // the round is over already
            task_->claim(part);
            if (state_.fetch_sub(1, std::memory_order_acq_rel) == (kClosed | 1)) state_.notify_one();
        }
    }

    // Enters the open round, whichever it is by now (its task is published before it opens).
    bool join() {
        for (std::uint32_t s = state_.load(std::memory_order_acquire); (s & kClosed) == 0;)
            if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return true;
        return false;
    }

    struct Task {
        ShareRef share;
        int rows, align, blocks, parts, chunk;
        Counter* next;
        int share_begin(int p) const { return static_cast<int>(static_cast<std::int64_t>(p) * blocks / parts); }
        // Part `own`'s share first, then the others'.
        void claim(int own) const {
            for (int i = 0; i < parts; i++) {
                const int p = (own + i) % parts, end = share_begin(p + 1);
                for (int b = next[p].value.fetch_add(chunk, std::memory_order_relaxed); b < end;
                     b = next[p].value.fetch_add(chunk, std::memory_order_relaxed))
                    share(b * align, std::min({rows, (b + chunk) * align, end * align}));
            }
        }
    };

    std::vector<std::thread> threads_;
    std::unique_ptr<Counter[]> next_;  // part p's next block to claim
    std::mutex run_mutex_;
    alignas(64) std::atomic<std::uint32_t> generation_{0};
    alignas(64) std::atomic<std::uint32_t> state_{kClosed};
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
