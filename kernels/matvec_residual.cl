// Output projections with the residual add: x[i] += w[i] . in. Used for attention's wo (in = the
// attention output) and the FFN's w2 (in = hb); the sum is formed first and then added, as run.c does.
__kernel void matvec_residual(__global const float* w, __global const float* in, __global float* x, int n, int rows) {
    __local float scratch[LOCAL];
    ROW_SETUP(rows);
    const float val = row_sum(partial_dot(w + (size_t)row * n, in, n, lane), scratch);
    if (row_valid && lane == 0) x[row] += val;
}
