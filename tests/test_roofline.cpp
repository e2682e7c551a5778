// The roofline SVG (bench --plot, check --plot): a well-formed XML document with the roof, one point per
// profiled kernel and the whole token, each labelled, on log-log axes.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/roofline_svg.hpp"
#include "models.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

// A small XML well-formedness check: every tag closed in order, attributes quoted, entities known.
// Returns the count of each element, or a message for the first defect.
struct XmlCheck {
    std::map<std::string, int> elements;
    std::string error;
};

XmlCheck check_xml(const std::string& s) {
    XmlCheck out;
    std::vector<std::string> open;
    std::size_t i = 0;
    const auto fail = [&](const std::string& why) {
        out.error = why + " at offset " + std::to_string(i);
        return out;
    };
    const auto name_at = [&](std::size_t& j) {
        const std::size_t start = j;
        while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '-' || s[j] == ':' || s[j] == '_')) ++j;
        return s.substr(start, j - start);
    };
    const auto entity_ok = [&](std::size_t j) {
        for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
            if (s.compare(j, std::string(e).size(), e) == 0) return true;
        return false;
    };
    if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
    while (i < s.size()) {
        if (s[i] == '&' && !entity_ok(i)) return fail("unknown entity");
        if (s[i] == '>') return fail("stray >");
        if (s[i] != '<') {
            ++i;
            continue;
        }
        std::size_t j = i + 1;
        const bool closing = j < s.size() && s[j] == '/';
        if (closing) ++j;
        const std::string name = name_at(j);
        if (name.empty()) return fail("tag without a name");
        if (closing) {
            if (open.empty() || open.back() != name) return fail("</" + name + "> closes nothing open");
            open.pop_back();
            if (j >= s.size() || s[j] != '>') return fail("malformed closing tag");
            i = j + 1;
            continue;
        }
        ++out.elements[name];
        while (true) {
            while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            if (j >= s.size()) return fail("unterminated tag");
            if (s[j] == '>') {
                open.push_back(name);
                break;
            }
            if (s.compare(j, 2, "/>") == 0) {
                ++j;
                break;
            }
            if (name_at(j).empty() || j >= s.size() || s[j] != '=') return fail("attribute without a value");
            const char quote = s[++j];
            if (quote != '"' && quote != '\'') return fail("unquoted attribute");
            const std::size_t end = s.find(quote, j + 1);
            if (end == std::string::npos || s.substr(j + 1, end - j - 1).find('<') != std::string::npos)
                return fail("unterminated attribute");
            for (std::size_t k = j + 1; k < end; ++k)
                if (s[k] == '&' && !entity_ok(k)) return fail("unknown entity in an attribute");
            j = end + 1;
        }
        i = j + 1;
    }
    if (!open.empty()) out.error = "<" + open.back() + "> never closed";
    return out;
}

std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

TEST(XmlCheck, CatchesWhatABrowserRefuses) {
    EXPECT_EQ(check_xml("<svg><g><circle r=\"1\"/></g></svg>").error, "");
    EXPECT_EQ(check_xml("<svg><g></svg>").error.empty(), false);
    EXPECT_EQ(check_xml("<svg><text>a & b</text></svg>").error.empty(), false);
    EXPECT_EQ(check_xml("<svg r=1></svg>").error.empty(), false);
    EXPECT_EQ(check_xml("<svg>").error.empty(), false);
}

TEST(Roofline, WellFormedWithTheRoofAndEveryPointLabelled) {
    Roofline roof;
    roof.title = "Device <A> & B";
    roof.copy_gbs = 4000;
    roof.points = {{"attn_qkv_rope", 0.5, 900}, {"attention", 0.25, 40}, {"whole token", 0.5, 1200}};
    const std::string svg = roofline_svg(roof);
    const XmlCheck xml = check_xml(svg);
    ASSERT_EQ(xml.error, "") << svg;
    EXPECT_EQ(xml.elements.at("svg"), 1);
    EXPECT_EQ(xml.elements.at("polyline"), 1);
    EXPECT_EQ(count(svg, "class=\"point\""), 3u);
    EXPECT_EQ(count(svg, "class=\"label\""), 3u);
    for (const char* label : {"1 attn_qkv_rope: 0.5 FLOP/B, 900 GFLOP/s", "2 attention: 0.25 FLOP/B, 40 GFLOP/s",
                              "3 whole token: 0.5 FLOP/B, 1200 GFLOP/s", "copy 4000 GB/s",
                              "Roofline: Device &lt;A&gt; &amp; B", "arithmetic intensity (FLOP/byte)",
                              "achieved GFLOP/s"})
        EXPECT_NE(svg.find(label), std::string::npos) << label;
    // Log-log axes over whole decades: x 0.1..10 FLOP/byte, y from 10 (the roof at 0.1 halved...) upwards.
    for (const char* tick : {">0.1</text>", ">1</text>", ">10</text>", ">100</text>", ">1000</text>"})
        EXPECT_NE(svg.find(tick), std::string::npos) << tick;
    EXPECT_EQ(svg.find("FMA"), std::string::npos) << "no compute roof without a measured one";
}

TEST(Roofline, FmaCeilingBendsTheRoofAtTheRidge) {
    Roofline roof;
    roof.title = "gpu";
    roof.copy_gbs = 100;
    roof.fma_gflops = 1000;  // ridge at 10 FLOP/byte
    roof.points = {{"whole token", 0.5, 40}};
    const std::string svg = roofline_svg(roof);
    ASSERT_EQ(check_xml(svg).error, "") << svg;
    const std::size_t at = svg.find("class=\"roof\"");
    ASSERT_NE(at, std::string::npos);
    const std::size_t from = svg.find("points=\"", at) + 8;
    EXPECT_EQ(count(svg.substr(from, svg.find('"', from) - from), ","), 3u) << "a slope and a flat part";
    EXPECT_NE(svg.find("FMA 1000 GFLOP/s"), std::string::npos);
}

// On tensor cores the prompt has a roof of theirs too, dashed: their probe over a multiply-add's products,
// above the FMA roof, reached along the bandwidth's slope.
TEST(Roofline, TensorCoresAddTheirRoofAboveTheFmaRoof) {
    BenchResult r;
    r.device.name = "gpu";
    r.model = "m";
    r.config = small_config();
    r.device_copy_gbs = 100;
    r.device_fma_gflops = 1000;
    r.prompt_tensor_cores = true;
    r.device_mma_gops = 6000;  // TF32 products, three a multiply-add for f32 weights
    const Roofline roof = roofline_from_bench(r);
    ASSERT_TRUE(roof.tensor_gflops.has_value());
    EXPECT_DOUBLE_EQ(*roof.tensor_gflops, 2000);
    const std::string svg = roofline_svg(roof);
    ASSERT_EQ(check_xml(svg).error, "") << svg;
    EXPECT_NE(svg.find("tensor cores 2000 GFLOP/s (3xTF32)"), std::string::npos) << svg;
    const std::size_t at = svg.find("class=\"tensor-roof\"");
    ASSERT_NE(at, std::string::npos) << svg;
    const std::size_t from = svg.find("points=\"", at) + 8;
    EXPECT_EQ(count(svg.substr(from, svg.find('"', from) - from), ","), 3u) << "a slope and a flat part";
    EXPECT_NE(svg.find("FMA 1000 GFLOP/s"), std::string::npos);

    r.prompt_tensor_cores = false;
    EXPECT_FALSE(roofline_from_bench(r).tensor_gflops.has_value());
    EXPECT_EQ(roofline_svg(roofline_from_bench(r)).find("tensor"), std::string::npos);
}

// bench --profile --plot: a point for every profiled kernel that does arithmetic, and the whole token
// (per op: a GPU's token kernel would be the one kernel).
TEST(Roofline, BenchPlotsEveryProfiledKernelAndTheToken) {
    TempDir dir;
    const CommandResult r = run_llama_cl("bench --synthetic tiny -n 2 --runs 1 --schedule per-op --profile --json --plot " +
                                         quote((dir / "r.svg").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    std::vector<std::string> kernels;
    for (const auto& row : j.at("profile"))
        if (row.at("flops_per_token").get<double>() > 0 && row.at("bytes_per_token").get<double>() > 0 &&
            row.at("ms_per_token").get<double>() > 0)
            kernels.push_back(row.at("name"));
    EXPECT_GE(kernels.size(), 5u) << r.out;  // the five per-layer kernels at least
    const std::string svg = read_file(dir / "r.svg");
    ASSERT_EQ(check_xml(svg).error, "") << svg;
    EXPECT_EQ(count(svg, "class=\"point\""), kernels.size() + 1);
    for (std::size_t i = 0; i < kernels.size(); ++i)
        EXPECT_NE(svg.find(">" + std::to_string(i + 1) + " " + kernels[i] + ": "), std::string::npos) << kernels[i];
    EXPECT_NE(svg.find(">" + std::to_string(kernels.size() + 1) + " whole token: "), std::string::npos);
}

// bench --prompt adds the FMA roof (fma_f32) and the whole prompt's point, at the intensity of weights read
// once per batch: above the token's.
TEST(Roofline, BenchPromptAddsTheFmaRoofAndThePromptPoint) {
    TempDir dir;
    const CommandResult r = run_llama_cl("bench --synthetic tiny -n 2 --runs 1 --prompt 20 --profile --json --plot " +
                                         quote((dir / "r.svg").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const std::string svg = read_file(dir / "r.svg");
    ASSERT_EQ(check_xml(svg).error, "") << svg;
    char fma[64];
    std::snprintf(fma, sizeof fma, "FMA %.4g GFLOP/s", j.at("device_fma_gflops").get<double>());
    EXPECT_NE(svg.find(fma), std::string::npos) << fma << "\n" << svg;
    const std::string prompt = " whole prompt (20 positions): ";
    const std::size_t at = svg.find(prompt);
    ASSERT_NE(at, std::string::npos) << svg;
    const std::size_t token_at = svg.find(" whole token: ");
    ASSERT_NE(token_at, std::string::npos) << svg;
    const double prompt_intensity = std::stod(svg.substr(at + prompt.size()));
    const double token_intensity = std::stod(svg.substr(token_at + std::string(" whole token: ").size()));
    EXPECT_GT(prompt_intensity, 5 * token_intensity) << "20 positions share each weight read";
    char gflops[64];
    std::snprintf(gflops, sizeof gflops, "%.4g GFLOP/s", j.at("prompt_gflops").get<double>());
    EXPECT_NE(svg.find(std::string(gflops), at), std::string::npos) << gflops;
}

// A plot that cannot be written is an error naming the path; a file left part written is removed, a
// device is not (writing /dev/full fails as a full disk does).
TEST(Roofline, BenchPlotNeedsTheProfile) {
    const CommandResult r = run_llama_cl("bench --synthetic tiny --plot x.svg");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("--plot requires --profile"), std::string::npos) << r.err;
}

}  // namespace
