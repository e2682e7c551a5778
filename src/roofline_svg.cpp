#include "llamacl/roofline_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "llamacl/error.hpp"
#include "llamacl/number_text.hpp"

namespace llamacl {

namespace {

// The page: the plot on the left, a legend of the points on the right.
constexpr double kWidth = 1120, kHeight = 560, kLeft = 80, kRight = 640, kTop = 50, kBottom = 490;
const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// number_text, under a name short enough for the markup below.
constexpr auto& number = number_text;

std::string escaped(const std::string& text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

// A logarithmic axis over whole decades [10^lo, 10^hi].
struct LogAxis {
    int lo, hi;
    double from, to;  // pixels of 10^lo and 10^hi
    double at(double v) const { return from + (std::log10(v) - lo) / (hi - lo) * (to - from); }
};

// Whole decades around [min, max], at least two.
LogAxis decades(double min, double max, double from, double to) {
    int lo = static_cast<int>(std::floor(std::log10(min))), hi = static_cast<int>(std::ceil(std::log10(max)));
    if (hi - lo < 2) hi = lo + 2;
    return {lo, hi, from, to};
}

std::string tick_label(int exponent) {
    return exponent >= -3 && exponent <= 5 ? number("%g", std::pow(10.0, exponent)) : "1e" + std::to_string(exponent);
}

}  // namespace

Roofline roofline_from_bench(const BenchResult& r) {
    Roofline roof;
    roof.title = r.device.name + " - " + r.model;
    roof.copy_gbs = r.device_copy_gbs;
    if (r.device_fma_gflops > 0) roof.fma_gflops = r.device_fma_gflops;  // measured with --prompt
    if (r.prompt_tensor_cores && r.device_mma_gops > 0) {
        const ElementType w = r.config.weight_format.type;
        roof.tensor_gflops = r.device_mma_gops / tensor_core_products(w, r.prompt_precision);
        roof.tensor_products = tensor_core_name(w, r.prompt_precision);
    }
    for (const CommandProfile& p : r.profile) {
        if (p.flops_per_token == 0 || p.bytes_per_token == 0 || !(p.ms_per_token > 0)) continue;
        roof.points.push_back({p.name, static_cast<double>(p.flops_per_token) / static_cast<double>(p.bytes_per_token),
                               static_cast<double>(p.flops_per_token) / (p.ms_per_token * 1e-3) / 1e9});
    }
    const double flops = static_cast<double>(command_flops_per_token("forward_token", r.config, r.finalize, r.context, r.tokens));
    const double bytes = static_cast<double>(r.traffic.total());
    if (flops > 0 && bytes > 0 && r.decode_tok_s > 0)
        roof.points.push_back({"whole token", flops / bytes, flops * r.decode_tok_s / 1e9});
    if (r.prompt > 0 && r.prompt_gflops > 0)
        roof.points.push_back({"whole prompt (" + std::to_string(r.prompt) + " positions)",
                               prefill_flops(r.config, r.prompt) / prefill_bytes(r.config, r.prompt, r.plan.prefill_batch),
                               r.prompt_gflops});
    return roof;
}

std::string roofline_svg(const Roofline& roof) {
    // The axes span every point and the roof over them (the ridge too, with an FMA ceiling).
    double x_min = 0.1, x_max = 10, y_min = INFINITY, y_max = 0;
    for (const RooflinePoint& p : roof.points) {
        x_min = std::min(x_min, p.intensity / 2);
        x_max = std::max(x_max, p.intensity * 2);
    }
    if (roof.fma_gflops && roof.copy_gbs > 0) x_max = std::max(x_max, *roof.fma_gflops / roof.copy_gbs * 4);
    if (roof.tensor_gflops && roof.copy_gbs > 0) x_max = std::max(x_max, *roof.tensor_gflops / roof.copy_gbs * 4);
    const double roof_top =
        std::max(roof.fma_gflops ? *roof.fma_gflops : roof.copy_gbs * x_max, roof.tensor_gflops.value_or(0));
    y_min = std::min(y_min, roof.copy_gbs * x_min);
    y_max = std::max(y_max, roof_top * 2);
    for (const RooflinePoint& p : roof.points) {
        y_min = std::min(y_min, p.gflops / 2);
        y_max = std::max(y_max, p.gflops * 2);
    }
    if (!(y_min > 0) || !std::isfinite(y_min)) y_min = y_max > 0 ? y_max / 1e3 : 1e-3;
    if (!(y_max > y_min)) y_max = y_min * 100;
    const LogAxis x = decades(x_min, x_max, kLeft, kRight), y = decades(y_min, y_max, kBottom, kTop);
    const double x_lo = std::pow(10.0, x.lo), x_hi = std::pow(10.0, x.hi);

    std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    number("%g", kWidth) + "\" height=\"" + number("%g", kHeight) + "\" viewBox=\"0 0 " +
                    number("%g", kWidth) + " " + number("%g", kHeight) +
                    "\" font-family=\"sans-serif\" font-size=\"13\">\n";
    s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    s += "<text x=\"" + number("%g", kLeft) + "\" y=\"28\" font-size=\"16\" font-weight=\"bold\">Roofline: " +
         escaped(roof.title) + "</text>\n";
    s += "<clipPath id=\"plot\"><rect x=\"" + number("%g", kLeft) + "\" y=\"" + number("%g", kTop) + "\" width=\"" +
         number("%g", kRight - kLeft) + "\" height=\"" + number("%g", kBottom - kTop) + "\"/></clipPath>\n";

    // Grid and ticks at every decade.
    s += "<g stroke=\"#dddddd\">\n";
    for (int e = x.lo; e <= x.hi; ++e) {
        const std::string px = number("%.1f", x.at(std::pow(10.0, e)));
        s += "<line x1=\"" + px + "\" y1=\"" + number("%g", kTop) + "\" x2=\"" + px + "\" y2=\"" + number("%g", kBottom) + "\"/>\n";
    }
    for (int e = y.lo; e <= y.hi; ++e) {
        const std::string py = number("%.1f", y.at(std::pow(10.0, e)));
        s += "<line x1=\"" + number("%g", kLeft) + "\" y1=\"" + py + "\" x2=\"" + number("%g", kRight) + "\" y2=\"" + py + "\"/>\n";
    }
    s += "</g>\n<g text-anchor=\"middle\">\n";
    for (int e = x.lo; e <= x.hi; ++e)
        s += "<text x=\"" + number("%.1f", x.at(std::pow(10.0, e))) + "\" y=\"" + number("%g", kBottom + 20) + "\">" +
             tick_label(e) + "</text>\n";
    s += "</g>\n<g text-anchor=\"end\">\n";
    for (int e = y.lo; e <= y.hi; ++e)
        s += "<text x=\"" + number("%g", kLeft - 8) + "\" y=\"" + number("%.1f", y.at(std::pow(10.0, e)) + 4) + "\">" +
             tick_label(e) + "</text>\n";
    s += "</g>\n";
    s += "<rect x=\"" + number("%g", kLeft) + "\" y=\"" + number("%g", kTop) + "\" width=\"" + number("%g", kRight - kLeft) +
         "\" height=\"" + number("%g", kBottom - kTop) + "\" fill=\"none\" stroke=\"black\"/>\n";
    s += "<text x=\"" + number("%g", (kLeft + kRight) / 2) + "\" y=\"" + number("%g", kBottom + 45) +
         "\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte)</text>\n";
    s += "<text transform=\"translate(22," + number("%g", (kTop + kBottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">achieved GFLOP/s</text>\n";

    // The roof: bandwidth x intensity, flat at the FMA ceiling from the ridge on.
    const double ridge = roof.fma_gflops ? std::min(x_hi, *roof.fma_gflops / roof.copy_gbs) : x_hi;
    std::string points = number("%.1f", x.at(x_lo)) + "," + number("%.1f", y.at(roof.copy_gbs * x_lo)) + " " +
                         number("%.1f", x.at(ridge)) + "," + number("%.1f", y.at(roof.copy_gbs * ridge));
    if (roof.fma_gflops) points += " " + number("%.1f", x.at(x_hi)) + "," + number("%.1f", y.at(*roof.fma_gflops));
    s += "<polyline class=\"roof\" clip-path=\"url(#plot)\" points=\"" + points +
         "\" fill=\"none\" stroke=\"black\" stroke-width=\"2.5\"/>\n";
    // Ending where the rising roof passes, the label stays above it.
    const double label_x = std::pow(10.0, x.lo + 0.6 * (x.hi - x.lo));
    s += "<text x=\"" + number("%.1f", x.at(label_x) - 4) + "\" y=\"" + number("%.1f", y.at(roof.copy_gbs * label_x) - 8) +
         "\" text-anchor=\"end\">copy " + number("%.4g", roof.copy_gbs) + " GB/s</text>\n";
    if (roof.fma_gflops)
        s += "<text x=\"" + number("%g", kRight - 6) + "\" y=\"" + number("%.1f", y.at(*roof.fma_gflops) - 8) +
             "\" text-anchor=\"end\">FMA " + number("%.4g", *roof.fma_gflops) + " GFLOP/s</text>\n";
    // The tensor cores' roof, dashed: the bandwidth's slope on to their ridge, then flat.
    if (roof.tensor_gflops) {
        const double from = std::min(ridge, *roof.tensor_gflops / roof.copy_gbs);
        const double to = std::min(x_hi, *roof.tensor_gflops / roof.copy_gbs);
        s += "<polyline class=\"tensor-roof\" clip-path=\"url(#plot)\" points=\"" + number("%.1f", x.at(from)) + "," +
             number("%.1f", y.at(roof.copy_gbs * from)) + " " + number("%.1f", x.at(to)) + "," +
             number("%.1f", y.at(roof.copy_gbs * to)) + " " + number("%.1f", x.at(x_hi)) + "," +
             number("%.1f", y.at(*roof.tensor_gflops)) + "\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\" " +
             "stroke-dasharray=\"6,4\"/>\n";
        s += "<text x=\"" + number("%g", kRight - 6) + "\" y=\"" + number("%.1f", y.at(*roof.tensor_gflops) - 8) +
             "\" text-anchor=\"end\">tensor cores " + number("%.4g", *roof.tensor_gflops) + " GFLOP/s (" +
             escaped(roof.tensor_products) + ")</text>\n";
    }

    // The points, numbered on the plot and named in the legend.
    for (std::size_t i = 0; i < roof.points.size(); ++i) {
        const RooflinePoint& p = roof.points[i];
        const std::string color = kColors[i % std::size(kColors)], n = std::to_string(i + 1);
        const std::string cx = number("%.1f", x.at(p.intensity)), cy = number("%.1f", y.at(p.gflops));
        const std::string figures = number("%.3g", p.intensity) + " FLOP/B, " + number("%.4g", p.gflops) + " GFLOP/s";
        s += "<circle class=\"point\" cx=\"" + cx + "\" cy=\"" + cy + "\" r=\"6\" fill=\"" + color +
             "\" stroke=\"black\"><title>" + escaped(p.label) + ": " + figures + "</title></circle>\n";
        s += "<text x=\"" + number("%.1f", x.at(p.intensity) + 8 + 10.0 * static_cast<double>(i % 3)) + "\" y=\"" +
             number("%.1f", y.at(p.gflops) - 6) + "\" font-size=\"11\">" + n + "</text>\n";
        const std::string ly = number("%g", kTop + 10 + 22.0 * static_cast<double>(i));
        s += "<circle cx=\"" + number("%g", kRight + 30) + "\" cy=\"" + ly + "\" r=\"6\" fill=\"" + color +
             "\" stroke=\"black\"/>\n";
        s += "<text class=\"label\" x=\"" + number("%g", kRight + 42) + "\" y=\"" + number("%g", kTop + 14 + 22.0 * static_cast<double>(i)) +
             "\">" + n + " " + escaped(p.label) + ": " + figures + "</text>\n";
    }
    return s + "</svg>\n";
}

void write_roofline_svg(AtomicFile& plot, const Roofline& roofline) {
    plot.write(roofline_svg(roofline));
    plot.commit();
}


}  // namespace llamacl
