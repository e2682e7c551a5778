// Work units: how a kernel's rows are dealt out to its work-groups and work-items.

// A kernel's body written once, as a function of its work unit, for its own kernel and for the token
// kernel (token.cl), must still be compiled as that kernel's body: left to the inliner, clang (PoCL's
// compiler) emits them as calls even with one call site; forced, each kernel's code is what it was before
// the split (clang's PTX compared). NVIDIA's compiler inlines them either way.
#if defined(__has_attribute)
#if __has_attribute(always_inline)
#define UNIT_FUNCTION inline __attribute__((always_inline))
#endif
#endif
#ifndef UNIT_FUNCTION
#define UNIT_FUNCTION inline
#endif

// Work units (a work-group's worth of rows each) of a step with `rows` output rows.
#define UNITS(rows) (((rows) + ROWS_PER_GROUP - 1) / ROWS_PER_GROUP)
// The units of a per-op kernel's work-group. CPU shapes launch a few work-groups per core
// (KernelSet::rows), each taking a run of consecutive units, an equal share: PoCL pays for every
// work-group it schedules, and a group computes the norm's scale once for its run. GPU shapes launch a
// work-group per unit, and take exactly that one (the run's bounds, computed, cost the register-capped
// builds), except for Q8_0, whose every work-group quantizes the input, and f16, whose rows take half
// the time of f32's to stream behind the same staging of the input: a few work-groups per compute unit
// (KernelSet::rows), each taking every get_num_groups(0)-th unit.
#if SHAPE_FAMILY != SHAPE_GPU
inline int group_share(int units) {
    const int groups = (int)get_num_groups(0);
    return (units + groups - 1) / groups;
}
#define FOR_GROUP_UNITS(u, rows)                                                                          \
    for (int u = (int)get_group_id(0) * group_share(UNITS(rows)), end_ = min(UNITS(rows), u + group_share(UNITS(rows))); \
         u < end_; u++)
#if ROWS_PER_GROUP == 1 && ((defined(QUANTIZED_WEIGHTS) && GROUP_SIZE % 16 == 0) || \
                            (defined(FLOAT_WEIGHTS) && SHAPE_FAMILY == SHAPE_EXACT))
// Quantized weights, and float ones in run.c's loops, on a row a unit: the work-group's run of rows
// several at a time, as row_run_step says (row_pair interleaves two rows' products, whose sums are chains
// of dependent adds; the float formats' partial_dot16 takes sixteen).
#define ROW_PAIRS
#ifdef FLOAT_WEIGHTS
#define ROW_BLOCKS
#endif
// The rows a body takes at `row` of its run, which ends at `end`: a block of `block` (ROW_BLOCKS builds,
// where the run holds one), else a pair, else the run's last row.
inline int row_run_step(int row, int end, int block) {
#ifdef ROW_BLOCKS
    if (row + block <= end) return block;
#endif
    return row + 1 < end ? 2 : 1;
}
#define FOR_GROUP_ROW_RUNS(row, end, rows, block)                                                        \
    for (int row = (int)get_group_id(0) * group_share(rows), end = min((rows), row + group_share(rows)); \
         row < end; row += row_run_step(row, end, block))
#endif
#elif defined(QUANTIZED_WEIGHTS) || defined(WEIGHT_F16)
#define FOR_GROUP_UNITS(u, rows) for (int u = (int)get_group_id(0); u < UNITS(rows); u += (int)get_num_groups(0))
#else
#define FOR_GROUP_UNITS(u, rows) for (int u = (int)get_group_id(0), once_ = 1; once_; once_ = 0)
#endif

// The row this work-item works on in work unit `unit` (one of a run of them a work-group of a kernel of
// its own takes, one of many a work-group takes in turn in the token kernel) and its lane
// within the row. Rows past `rows` are clamped to the last one so that every work-item still reaches the
// barriers; the caller writes only when row_valid.
#define ROW_SETUP(unit, rows)                                             \
    const int lane = get_local_id(0) % ROW_THREADS;                       \
    const int row_unclamped = (unit) * ROWS_PER_GROUP + get_local_id(0) / ROW_THREADS; \
    const int row_valid = row_unclamped < (rows);                         \
    const int row = row_valid ? row_unclamped : (rows) - 1
