// Loads of the matrices' weights, one set per weight format (the host defines WEIGHT_F32 for f32:
// WeightFormat in weight_format.hpp). Every row product reads its weights through these, so a format is
// added here, not in each kernel:
//   weight_t               the element type a weight pointer points to
//   WEIGHT_ROW(w, row, n)  row `row` of a matrix of rows of n elements
//   WEIGHT(w, j)           element j of a row, as a float
//   WEIGHT4(w, j4)         elements 4 j4 .. 4 j4 + 3 of a row, as a float4
//   WEIGHTV(w, j)          floatv elements from j (CPU families)
// The norms' weights, the embedding rows written to x and the KV cache stay floats.
#if !defined(WEIGHT_F32) && !defined(WEIGHT_F16)
#define WEIGHT_F32  // (the default only keeps the program buildable on its own)
#endif

#ifdef WEIGHT_F32
typedef float weight_t;
#define WEIGHT_ROW(w, row, n) ((w) + (size_t)(row) * (n))
#define WEIGHT(w, j) ((w)[j])
#define WEIGHT4(w, j4) vload4(j4, w)
#define WEIGHTV(w, j) vloadv((w) + (j))
#endif

// IEEE halves, widened exactly as they load (vload_half is core OpenCL 1.2, no extension): the same
// arithmetic as f32 on the widened weights, which is the reference's for f16.
#ifdef WEIGHT_F16
typedef half weight_t;
#define WEIGHT_ROW(w, row, n) ((w) + (size_t)(row) * (n))
#define WEIGHT(w, j) vload_half(j, w)
#define WEIGHT4(w, j4) vload_half4(j4, w)
#if VECTOR_WIDTH == 16
#define WEIGHTV(w, j) vload_half16(0, (w) + (j))
#else
#define WEIGHTV(w, j) vload_half(0, (w) + (j))
#endif
#endif
