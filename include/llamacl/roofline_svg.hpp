#pragma once
// `bench --plot` and `check --plot`: the roofline as an SVG picture. Log-log axes of arithmetic intensity
// (FLOP per byte of device memory read) and achieved GFLOP/s; the roof is the measured copy bandwidth
// (GB/s x FLOP/byte) and, where bench measures one (--prompt), the FMA ceiling, and on tensor cores
// theirs, dashed; each kernel of --profile, the whole token and the whole prompt are labelled points.
#include <optional>
#include <string>
#include <vector>

#include "llamacl/atomic_file.hpp"
#include "llamacl/bench.hpp"

namespace llamacl {

struct RooflinePoint {
    std::string label;
    double intensity = 0;  // FLOP/byte
    double gflops = 0;     // achieved GFLOP/s
};

struct Roofline {
    std::string title;
    double copy_gbs = 0;                 // the memory roof
    std::optional<double> fma_gflops;    // the compute roof: bench's FMA probe (fma_f32)
    // The prompt's roof on tensor cores: their probe over the products a multiply-add takes, named by them
    // ("3xTF32", "int8").
    std::optional<double> tensor_gflops;
    std::string tensor_products;
    std::vector<RooflinePoint> points;   // the kernels, then the whole token and the whole prompt
};

// The roofline of a bench run: its copy bandwidth and FMA throughput (with --prompt; on tensor cores
// their probe over a multiply-add's products too), a point for every
// profiled decode command that reads weights and does arithmetic (bytes and FLOPs per token both > 0),
// the whole token, and with --prompt the whole prompt (prefill_flops over prefill_bytes).
Roofline roofline_from_bench(const BenchResult& result);

// The picture, a complete SVG document.
std::string roofline_svg(const Roofline& roofline);
// Writes roofline_svg() into `plot` and puts it in place; Error naming the path when it cannot.
void write_roofline_svg(AtomicFile& plot, const Roofline& roofline);

}  // namespace llamacl
