// Work-groups of one launch publishing their writes to each other.

// Programs built as OpenCL C 2.0 or later (the host defines DEVICE_FENCES for them: the token kernel, and
// GPU shapes where the compiler takes it) can publish one work-group's writes to the others while they
// run. OpenCL 1.2's mem_fence orders only within a work-group (NVIDIA compiles it to membar.cta, and
// another compute unit may then read a stale line from its own cache); a fence of device scope is the
// one that publishes writes to the whole device.
#ifdef DEVICE_FENCES
#define DEVICE_FENCE() atomic_work_item_fence(CLK_GLOBAL_MEM_FENCE, memory_order_acq_rel, memory_scope_device)

// Whether this work-group is the last of `count` to arrive at `counter`; if so, every other one's global
// writes before its arrival are visible to it, and the counter is back at 0 for its next use. Lets the
// last of a step's work-groups finish the step (combine the others' partial results) without a launch or
// a grid barrier of its own. Every work-item must call it; `last` is the group's local flag. A null
// counter counts nothing (false), for callers that must reach its barriers either way.
inline int last_to_arrive(volatile __global uint* counter, uint count, __local int* last) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        *last = 0;
        if (counter) {
            DEVICE_FENCE();
            *last = atomic_inc(counter) == count - 1;
            if (*last) *counter = 0;  // nobody else counts here until the step's next use
            DEVICE_FENCE();
        }
    }
    // Global as well: the other work-items read the other work-groups' writes after it.
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    return *last;
}
#endif
