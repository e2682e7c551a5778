// Output projections with the residual add: x[i] += w[i] . in. Used for attention's wo (in = the
// attention output) and the FFN's w2 (in = hb); the sum is formed first and then added, as run.c does.
__kernel void matvec_residual(__global const float* w, __global const float* in, __global float* x, int n, int rows,
                              __local float* staged, int staged_n) {
    __local float scratch[LOCAL];
    ROW_SETUP(rows);
    if (staged_n > 0) stage_input(staged, in, 0, 0.0f, n);
    const float val = row_sum(row_dot(w + (size_t)row * n, in, 0, 0.0f, staged, staged_n, n, lane), scratch);
    if (row_valid && lane == 0) x[row] += val;
}
