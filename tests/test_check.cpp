// `llama-cl check`: the ladder passes on PoCL for the generated model and a real checkpoint, its JSON
// says the same, and an injected fault fails the rung it names with exit status 4 and nothing after it run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llamacl/check.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

// The rung's report line: "  NAME  STATUS ...".
std::string rung_line(const std::string& out, const std::string& name) {
    const std::size_t at = out.find("  " + name + " ");
    if (at == std::string::npos) return "";
    return out.substr(at, out.find('\n', at) - at);
}

std::string status_of(const std::string& out, const std::string& name) {
    std::string line = rung_line(out, name).substr(2 + name.size());
    line.erase(0, line.find_first_not_of(' '));
    return line.rfind("not run", 0) == 0 ? "not run" : line.substr(0, line.find(' '));
}

TEST(Check, EveryRungPassesOnTheGeneratedModel) {
    const CommandResult r = run_llama_cl("check");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (const std::string& name : rung_names()) {
        const std::string status = status_of(r.out, name);
        // The token kernel (and so its grid barrier) runs on GPUs only; PoCL says why not.
        if (name == "grid-barrier" && status == "skip") {
            EXPECT_NE(rung_line(r.out, name).find("no token kernel here"), std::string::npos) << r.out;
            continue;
        }
        EXPECT_EQ(status, "pass") << name << "\n" << r.out;
    }
    EXPECT_NE(r.out.find("check: passed: "), std::string::npos) << r.out;
    EXPECT_NE(rung_line(r.out, "kernels").find("max abs err "), std::string::npos) << r.out;
}

TEST(Check, JsonReportsTheSameRungsInOrder) {
    const CommandResult r = run_llama_cl("check --json");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("passed"), true);
    EXPECT_TRUE(j.at("first_failure").is_null());
    EXPECT_EQ(j.at("model"), "synthetic:tiny");
    ASSERT_EQ(j.at("rungs").size(), rung_names().size());
    for (std::size_t i = 0; i < rung_names().size(); ++i) {
        const nlohmann::json& rung = j.at("rungs").at(i);
        EXPECT_EQ(rung.at("name"), rung_names()[i]);
        EXPECT_TRUE(rung.at("status") == "pass" || rung.at("status") == "skip") << rung.dump();
        EXPECT_GE(rung.at("seconds").get<double>(), 0.0);
    }
    const nlohmann::json& kernels = j.at("rungs").at(2);
    EXPECT_LE(kernels.at("max_abs_err").get<double>(), kernels.at("tolerance").get<double>());
}

TEST(Check, InjectedRungFaultExitsFourNamingTheRung) {
    const CommandResult r = run_command("LLAMACL_INJECT_FAULT=rung:kernels '" + std::string(LLAMACL_BINARY) + "' check");
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "buffers"), "pass") << r.out;
    EXPECT_EQ(status_of(r.out, "kernels"), "fail") << r.out;
    EXPECT_EQ(status_of(r.out, "layer"), "not run") << r.out;
    EXPECT_EQ(status_of(r.out, "bandwidth"), "not run") << r.out;
    EXPECT_NE(r.out.find("check: FAILED at kernels: injected fault (LLAMACL_INJECT_FAULT=rung:kernels)"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check: next: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--work-shape exact"), std::string::npos) << r.out;

    const CommandResult j = run_command("LLAMACL_INJECT_FAULT=rung:bandwidth '" + std::string(LLAMACL_BINARY) + "' check --json");
    EXPECT_EQ(j.exit_code, 4) << j.out << j.err;
    EXPECT_EQ(nlohmann::json::parse(j.out).at("first_failure"), "bandwidth");
}

// A boundary fault (compare.hpp's syntax) corrupts the device's result itself: layer 1's q passes the
// one-layer rung (layer 0) and fails the whole forward pass there.
TEST(Check, BoundaryFaultFailsTheForwardRungAtItsBoundary) {
    const CommandResult r = run_command("LLAMACL_INJECT_FAULT=layer:1,op:q '" + std::string(LLAMACL_BINARY) + "' check");
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "layer"), "pass") << r.out;
    EXPECT_EQ(status_of(r.out, "forward"), "fail") << r.out;
    EXPECT_NE(r.out.find("check: FAILED at forward: first divergence at token 0, layer 1, q"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--schedule per-op"), std::string::npos) << r.out;
}

TEST(Check, UnknownRungIsAUsageError) {
    const CommandResult r = run_command("LLAMACL_INJECT_FAULT=rung:nope '" + std::string(LLAMACL_BINARY) + "' check");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "llama-cl: LLAMACL_INJECT_FAULT=rung:nope: unknown rung; rungs: device, buffers, kernels, layer, "
                     "forward, generate, grid-barrier, bandwidth\n");
}

TEST(Check, RealCheckpointPassesWithTheRoofline) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    const CommandResult r = run_llama_cl("check " + quote((shared / "models" / "stories260K.bin").string()) + " -z " +
                                         quote((shared / "models" / "tok512.bin").string()) + " --plot " +
                                         quote((dir / "roofline.svg").string()));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "generate"), "pass") << r.out;
    EXPECT_NE(rung_line(r.out, "bandwidth").find("roofline written to"), std::string::npos) << r.out;
    const std::string svg = read_file(dir / "roofline.svg");
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
    EXPECT_NE(svg.find("whole token"), std::string::npos);
}

TEST(Check, MissingCheckpointIsABadFile) {
    const CommandResult r = run_llama_cl("check /nonexistent/model.bin");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("/nonexistent/model.bin"), std::string::npos) << r.err;
}

// A runtime option the device cannot honour (the token kernel needs a GPU shape) fails the first rung that
// starts the runtime, naming the option rather than blaming the numbers.
TEST(Check, RuntimeThatCannotStartFailsTheLayerRungWithItsRemedy) {
    const CommandResult r = run_llama_cl("check --work-shape cpu --schedule token");
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "kernels"), "pass") << r.out;
    EXPECT_NE(r.out.find("check: FAILED at layer: the runtime did not start: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--schedule token"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check: next: change or drop the option the message names"), std::string::npos) << r.out;
}

TEST(Check, UnwritablePlotIsABadFileBeforeAnyRung) {
    const CommandResult r = run_llama_cl("check --plot /nonexistent/dir/r.svg");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "llama-cl: --plot: cannot write /nonexistent/dir/r.svg; give a path in a writable directory\n");
}

}  // namespace
