#pragma once
// The CPU reference's threads. run.c's matmul is an OpenMP loop over output rows; so is the reference's:
// a matmul's rows are dealt out in contiguous shares, one per CPU the process may use (a thread that
// finishes its own takes over what another has not begun), and each row is still summed by one thread
// in run.c's order, so the split changes no bit.
#include <cstdint>
#include <type_traits>

namespace llamacl {

// A borrowed callable share(first, last), passed on without a copy or an allocation (a matmul hands one
// to the threads every call).
class ShareRef {
public:
    template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ShareRef>>>
    ShareRef(const F& f)  // NOLINT: converts implicitly, as a function parameter
        : f_(&f), call_([](const void* p, int first, int last) { (*static_cast<const F*>(p))(first, last); }) {}
    void operator()(int first, int last) const { call_(f_, first, last); }

private:
    const void* f_;
    void (*call_)(const void*, int, int);
};

// Calls share(first, last) for contiguous shares [first, last) of [0, rows), each starting at a multiple
// of `align` rows, on the process's worker threads and the caller, and returns when all have returned.
// Work of fewer than kMinSharedWork multiply-adds (`work`) runs on the caller alone: the hand-off to
// the workers would cost more than it saves. Calls from several threads at once take turns.
void for_row_shares(int rows, int align, std::uint64_t work, ShareRef share);

inline constexpr std::uint64_t kMinSharedWork = std::uint64_t{1} << 12;

}  // namespace llamacl
