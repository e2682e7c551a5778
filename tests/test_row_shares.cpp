// The CPU reference's threads (row_shares.hpp): every row in exactly one share, shares starting on the
// alignment, a few shares per usable CPU, and small work kept on the calling thread; the usable CPUs
// within the affinity mask and a container's CPU quota.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "llamacl/host_memory.hpp"
#include "llamacl/row_shares.hpp"

using namespace llamacl;

TEST(RowShares, EveryRowInExactlyOneAlignedShare) {
    for (const int rows : {1, 5, 16, 17, 300, 4099}) {
        for (const int align : {1, 16}) {
            std::vector<std::atomic<int>> seen(static_cast<std::size_t>(rows));
            std::mutex m;
            std::vector<std::pair<int, int>> shares;
            for_row_shares(rows, align, kMinSharedWork, [&](int first, int last) {
                for (int i = first; i < last; ++i) seen[static_cast<std::size_t>(i)]++;
                const std::lock_guard<std::mutex> lock(m);
                shares.emplace_back(first, last);
            });
            for (int i = 0; i < rows; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], 1) << rows << " rows, row " << i;
            for (const auto& [first, last] : shares) {
                EXPECT_LT(first, last);
                EXPECT_EQ(first % align, 0) << rows << " rows aligned to " << align;
            }
            // An even share per usable CPU, claimed in chunks of half of one (and a remainder).
            cpu_set_t cpus;
            ASSERT_EQ(::sched_getaffinity(0, sizeof cpus, &cpus), 0);
            EXPECT_LE(shares.size(), 3u * static_cast<unsigned>(CPU_COUNT(&cpus))) << rows << " rows";
        }
    }
}

TEST(RowShares, SmallWorkStaysOnTheCallingThreadInOneShare) {
    const std::thread::id caller = std::this_thread::get_id();
    int calls = 0;
    for_row_shares(300, 1, kMinSharedWork - 1, [&](int first, int last) {
        ++calls;
        EXPECT_EQ(std::this_thread::get_id(), caller);
        EXPECT_EQ(first, 0);
        EXPECT_EQ(last, 300);
    });
    EXPECT_EQ(calls, 1);
}

TEST(RowShares, CallersOnSeveralThreadsEachGetTheirRows) {
    constexpr int kRows = 1000;
    std::vector<std::vector<int>> outs(4, std::vector<int>(kRows, 0));
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c)
        callers.emplace_back([&, c] {
            for (int round = 0; round < 50; ++round)
                for_row_shares(kRows, 8, kMinSharedWork, [&](int first, int last) {
                    for (int i = first; i < last; ++i) outs[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)]++;
                });
        });
    for (std::thread& t : callers) t.join();
    for (int c = 0; c < 4; ++c)
        for (int i = 0; i < kRows; ++i) ASSERT_EQ(outs[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)], 50);
}

// A CPU quota allows its quota over its period, rounded up (1.5 CPUs: two threads may run); -1 (cgroup
// v1's "no limit") or a missing period allows any number.
TEST(UsableCpus, AQuotaAllowsItsCpusRoundedUp) {
    EXPECT_EQ(cpus_of_quota(100000, 100000), 1);
    EXPECT_EQ(cpus_of_quota(150000, 100000), 2);
    EXPECT_EQ(cpus_of_quota(50000, 100000), 1);
    EXPECT_EQ(cpus_of_quota(800000, 100000), 8);
    EXPECT_EQ(cpus_of_quota(-1, 100000), 0);
    EXPECT_EQ(cpus_of_quota(100000, 0), 0);
}

TEST(UsableCpus, NoMoreThanTheAffinityMaskHolds) {
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    EXPECT_GE(usable_cpus(), 1);
    EXPECT_LE(usable_cpus(), CPU_COUNT(&set));
}
