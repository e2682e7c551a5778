// Output projections with the residual add: x[i] += w[i] . in. Used for attention's wo (in = the
// attention output) and the FFN's w2 (in = hb); the sum is formed first and then added, as run.c does.
// The rows of work unit `unit`, the input already staged when staged_n > 0 (when negative, the token
// kernel's, this unit stages it: row_dot).
UNIT_FUNCTION void matvec_residual_unit(int unit, __global const weight_t* w, __global const float* in, __global float* x,
                                        int n, int rows, __local float* staged, int staged_n,
                                        __local float* scratch) {
    ROW_SETUP(unit, rows);
#ifdef FEW_GROUPS
    // The residual is read before the dot product, so that its wait overlaps the row's instead of following
    // the reduction (only this work-item writes x[row] in this step).
    const float residual = row_valid && lane == 0 ? x[row] : 0.0f;
#endif
    const float val = row_sum(row_dot(WEIGHT_ROW(w, row, n), in, 0, 0.0f, staged, staged_n, n, lane, scratch), scratch);
    if (!row_valid || lane != 0) return;
#ifndef FEW_GROUPS
    const float residual = x[row];
#endif
    x[row] = residual + val;
}

// A work-group's part of the step: the per-op kernel's body, and the CPU families' token kernel's step.
UNIT_FUNCTION void matvec_residual_step(__global const weight_t* w, __global const float* in, __global float* x, int n,
                                        int rows, __local float* staged, int staged_n, __local float* scratch) {
    if (staged_n > 0) stage_input(staged, in, 0, 0.0f, n);
#ifdef ROW_PAIRS
    FOR_GROUP_ROW_RUNS(row, end, rows, 16) {
        const int step = row_run_step(row, end, 16);
#ifdef ROW_BLOCKS
        if (step == 16) {
            const float16 v = partial_dot16(WEIGHT_ROW(w, row, n), WEIGHT_ROW(w, row + 8, n), in, 0, 0.0f, n);
            vstorew(vloadw(x + row) + v, x + row);
            continue;
        }
#endif
        if (step == 1) {
            matvec_residual_unit(row, w, in, x, n, rows, staged, staged_n, scratch);
            continue;
        }
        const float2 v = row_pair(WEIGHT_ROW(w, row, n), WEIGHT_ROW(w, row + 1, n), in, 0, 0.0f, staged, staged_n, n, 0,
                                  scratch);
        x[row] = x[row] + v.x;
        x[row + 1] = x[row + 1] + v.y;
    }
#else
    FOR_GROUP_UNITS(unit, rows)
    matvec_residual_unit(unit, w, in, x, n, rows, staged, staged_n, scratch);
#endif
}

__kernel void matvec_residual(__global const weight_t* w, __global const float* in, __global float* x, int n, int rows,
                              __local float* staged, int staged_n) {
    __local float scratch[LOCAL];
    matvec_residual_step(w, in, x, n, rows, staged, staged_n, scratch);
}
