// `llama-cl check`: the ladder passes on PoCL for the generated model and a real checkpoint in every
// weight format the device reads, its JSON says the same, and an injected fault fails the rung it names
// with exit status 4 and nothing after it run.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llamacl/check.hpp"
#include "llamacl/device.hpp"
#include "llamacl/tokenizer.hpp"
#include "models.hpp"
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

// `llama-cl check ARGS` with LLAMACL_INJECT_FAULT=FAULT.
CommandResult check_with_fault(const std::string& fault, const std::string& args = "") {
    return run_command("LLAMACL_INJECT_FAULT=" + fault + " '" + std::string(LLAMACL_BINARY) + "' check" + args);
}

const std::vector<ElementType> kDeviceFormats = {ElementType::f32, ElementType::f16, ElementType::q8_0};

TEST(Check, TheFormatStagesRepeatForEachFormat) {
    EXPECT_EQ(rung_names(kDeviceFormats),
              (std::vector<std::string>{"device", "buffers", "kernels:f32", "layer:f32", "forward:f32", "prefill:f32",
                                        "generate:f32", "grid-barrier:f32", "kernels:f16", "layer:f16", "forward:f16",
                                        "prefill:f16", "generate:f16", "grid-barrier:f16", "kernels:q8_0", "layer:q8_0",
                                        "forward:q8_0", "prefill:q8_0", "generate:q8_0", "grid-barrier:q8_0",
                                        "bandwidth"}));
    // The generated model's rows are not whole blocks of 32: every format but q4_0 (the next test's).
    std::vector<ElementType> all = kDeviceFormats;
    all.push_back(ElementType::q4_0);
    EXPECT_EQ(std::vector<ElementType>(std::begin(kDeviceElementTypes), std::end(kDeviceElementTypes)), all);
}

// A model whose rows are whole blocks of 32 climbs q4_0's rungs too, and passes them.
TEST(Check, AModelOfWholeBlocksClimbsQ4_0) {
    LLAMACL_REQUIRE_SHARED(shared);
    const std::filesystem::path model = shared / "models/gguf/synthG.bin";
    const Checkpoint ck = Checkpoint::open(model.string());
    EXPECT_EQ(check_formats(ck), (std::vector<ElementType>{ElementType::f32, ElementType::f16, ElementType::q8_0,
                                                           ElementType::q4_0}));
    const CommandResult r =
        run_llama_cl("check " + quote(model.string()) + " -z " + quote((shared / "models/tok512.bin").string()) +
                     " --weights q4_0");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (const std::string& name : rung_names(std::vector<ElementType>{ElementType::q4_0})) {
        const std::string status = status_of(r.out, name);
        EXPECT_TRUE(status == "pass" || (name == "grid-barrier:q4_0" && status == "skip")) << name << "\n" << r.out;
    }
    EXPECT_NE(rung_line(r.out, "kernels:q4_0").find("q4_0 (ggml's blocks of 32) weights"), std::string::npos) << r.out;
}

TEST(Check, AnFp32ModelClimbsQ8OnlyWhereItsGroupsAreWholeWords) {
    TempDir dir;
    // hidden_dim 6: the default group size is 2, which the device's Q8_0 kernels do not read.
    const Checkpoint odd = Checkpoint::open(write_model(dir, Config{8, 6, 1, 2, 2, 260, 8, true}).string());
    EXPECT_EQ(check_formats(odd), (std::vector<ElementType>{ElementType::f32, ElementType::f16}));
    const Checkpoint even = Checkpoint::open(write_model(dir, Config{8, 16, 1, 2, 2, 260, 8, true}, 0, 7, "even.bin").string());
    EXPECT_EQ(check_formats(even), kDeviceFormats);
}

TEST(Check, EveryRungPassesOnTheGeneratedModel) {
    const CommandResult r = run_llama_cl("check");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (const std::string& name : rung_names(kDeviceFormats)) {
        const std::string status = status_of(r.out, name);
        // A device without the token kernel (and so its grid barrier) says why not.
        if (name.rfind("grid-barrier:", 0) == 0 && status == "skip") {
            EXPECT_NE(rung_line(r.out, name).find("no token kernel here"), std::string::npos) << r.out;
            continue;
        }
        EXPECT_EQ(status, "pass") << name << "\n" << r.out;
    }
    EXPECT_NE(r.out.find("check: passed: "), std::string::npos) << r.out;
    EXPECT_NE(rung_line(r.out, "kernels:f16").find("12 kernel checks, f16 weights"), std::string::npos) << r.out;
    // In the generated model's groups (tiny: dim 32, hidden 72: 8), quantize_rows one more check.
    EXPECT_NE(rung_line(r.out, "kernels:q8_0").find("13 kernel checks, q8_0 (group size 8) weights"), std::string::npos)
        << r.out;
    if (!Device::open("", "").info().is_cpu) return;  // (a GPU's shapes and batches are its own)
    // Q8_0 on a CPU: the exact shape, as the runtime takes it there.
    EXPECT_NE(rung_line(r.out, "kernels:q8_0")
                  .find("bit-identical on 1 work-item per row, work-groups of 1, run.c's sequential loops"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("q8_0: 1 work-item per row, work-groups of 1, run.c's sequential loops"), std::string::npos)
        << r.out;
    // The generated model's context holds two of a CPU shape's prefill batches, and the rung crosses one.
    EXPECT_NE(rung_line(r.out, "prefill:f32").find("70 positions in 2 batches of up to 64"), std::string::npos)
        << r.out;
}

TEST(Check, JsonReportsTheSameRungsInOrder) {
    const CommandResult r = run_llama_cl("check --json");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("passed"), true);
    EXPECT_TRUE(j.at("first_failure").is_null());
    EXPECT_EQ(j.at("model"), "synthetic:tiny (seq_len 128)");
    const std::vector<std::string> names = rung_names(kDeviceFormats);
    ASSERT_EQ(j.at("rungs").size(), names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
        const nlohmann::json& rung = j.at("rungs").at(i);
        EXPECT_EQ(rung.at("name"), names[i]);
        const std::size_t colon = names[i].find(':');
        if (colon == std::string::npos)
            EXPECT_TRUE(rung.at("format").is_null()) << rung.dump();
        else
            EXPECT_EQ(rung.at("format"), names[i].substr(colon + 1));
        EXPECT_TRUE(rung.at("status") == "pass" || rung.at("status") == "skip") << rung.dump();
        EXPECT_GE(rung.at("seconds").get<double>(), 0.0);
    }
    const nlohmann::json& kernels = j.at("rungs").at(2);
    EXPECT_LE(kernels.at("max_abs_err").get<double>(), kernels.at("tolerance").get<double>());
}

// The observer (check_command's printer) sees each rung as it is reported, in order, those after a
// failure too, and what it prints makes the whole report's text.
TEST(Check, EachRungIsReportedAsItIsClimbed) {
    TempDir dir;
    const Config c = small_config();
    const Checkpoint ck = Checkpoint::open(write_model(dir, c).string());
    const Tokenizer tokenizer = Tokenizer::load((dir / "tok.bin").string(), c.vocab_size);
    Device device = Device::open("", "");
    CheckOptions o;
    o.formats = check_formats(ck);
    o.injected_rung = "forward:f16";
    std::vector<std::string> seen;
    std::string streamed;
    const CheckReport report = run_check(device, ck, tokenizer, o, [&](const CheckReport& so_far) {
        ASSERT_EQ(so_far.rungs.size(), seen.size() + 1);
        if (seen.empty()) streamed += format_check_header(so_far);
        seen.push_back(so_far.rungs.back().name);
        streamed += format_rung_line(so_far.rungs.back());
    });
    EXPECT_EQ(seen, rung_names(kDeviceFormats));
    ASSERT_NE(report.first_failure(), nullptr);
    EXPECT_EQ(report.first_failure()->name, "forward:f16");
    EXPECT_EQ(streamed + format_check_summary(report), format_check_text(report));
}

TEST(Check, InjectedRungFaultExitsFourNamingTheRung) {
    const CommandResult r = check_with_fault("rung:kernels:f32");
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "buffers"), "pass") << r.out;
    EXPECT_EQ(status_of(r.out, "kernels:f32"), "fail") << r.out;
    EXPECT_EQ(status_of(r.out, "layer:f32"), "not run") << r.out;
    EXPECT_EQ(status_of(r.out, "kernels:f16"), "not run") << r.out;
    EXPECT_EQ(status_of(r.out, "bandwidth"), "not run") << r.out;
    EXPECT_NE(r.out.find("check: FAILED at kernels:f32: injected fault (LLAMACL_INJECT_FAULT=rung:kernels:f32)"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check: next: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--work-shape exact"), std::string::npos) << r.out;

    const CommandResult j = check_with_fault("rung:bandwidth", " --json");
    EXPECT_EQ(j.exit_code, 4) << j.out << j.err;
    EXPECT_EQ(nlohmann::json::parse(j.out).at("first_failure"), "bandwidth");
}

// A later format's rung failing after the first format's passed says that one runs; the fault reaches
// every format's rungs (q8_0's after f16's passed).
TEST(Check, AFailureInALaterFormatNamesTheFirst) {
    for (const std::string format : {"f16", "q8_0"}) {
        const CommandResult r = check_with_fault("rung:prefill:" + format);
        EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
        EXPECT_EQ(status_of(r.out, "generate:f32"), "pass") << r.out;
        EXPECT_EQ(status_of(r.out, "forward:" + format), "pass") << r.out;
        EXPECT_EQ(status_of(r.out, "prefill:" + format), "fail") << r.out;
        EXPECT_EQ(status_of(r.out, "generate:" + format), "not run") << r.out;
        EXPECT_EQ(status_of(r.out, "generate:f16"), format == "f16" ? "not run" : "pass") << r.out;
        EXPECT_NE(r.out.find("check: FAILED at prefill:" + format + ": injected fault"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("; the f32 rungs passed: --weights f32 runs on them\n"), std::string::npos) << r.out;
    }
}

// --weights F climbs the model's rungs in F alone, Q8_0 included.
TEST(Check, WeightsChoosesTheFormat) {
    for (ElementType format : {ElementType::f16, ElementType::q8_0}) {
        const std::string name = element_name(format);
        const CommandResult r = run_llama_cl("check --weights " + name + " --json");
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        const nlohmann::json j = nlohmann::json::parse(r.out);
        const std::vector<std::string> names = rung_names(std::vector<ElementType>{format});
        ASSERT_EQ(j.at("rungs").size(), names.size()) << r.out;
        for (std::size_t i = 0; i < names.size(); ++i) {
            const nlohmann::json& rung = j.at("rungs").at(i);
            EXPECT_EQ(rung.at("name"), names[i]);
            EXPECT_TRUE(rung.at("status") == "pass" || rung.at("status") == "skip") << rung.dump();
        }
        EXPECT_EQ(j.at("rungs").at(2).at("name"), "kernels:" + name);
    }
}

// An fp32 model whose widths only 2 divides converts to Q8_0 in groups of 2, which the device cannot read
// (a word of 4 weights at a time): the kernel rung fails with the runtime's own message, before any
// runtime is started.
TEST(Check, Q8GroupsTheDeviceCannotReadFailTheKernelRung) {
    TempDir dir;
    const auto model = write_model(dir, {36, 98, 2, 6, 2, 300, 40, true}, 1);
    const CommandResult r =
        run_llama_cl("check " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) + " --weights q8_0");
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "buffers"), "pass") << r.out;
    EXPECT_NE(r.out.find("check: FAILED at kernels:q8_0: " + model.string() +
                         " (--weights q8_0): the OpenCL backend runs q8_0 weights in groups of a multiple of 4"),
              std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check: next: the message names the remedy"), std::string::npos) << r.out;
    EXPECT_EQ(status_of(r.out, "layer:q8_0"), "not run") << r.out;
}

// A boundary fault (compare.hpp's syntax) corrupts the device's result itself: layer 1's q passes the
// one-layer rung (layer 0) and fails the whole forward pass there.
TEST(Check, BoundaryFaultFailsTheForwardRungAtItsBoundary) {
    const CommandResult r = check_with_fault("layer:1,op:q");
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "layer:f32"), "pass") << r.out;
    EXPECT_EQ(status_of(r.out, "forward:f32"), "fail") << r.out;
    EXPECT_NE(r.out.find("check: FAILED at forward:f32: first divergence at token 0, layer 1, q"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("--schedule per-op"), std::string::npos) << r.out;
}

TEST(Check, ATokenizerWithoutItsCheckpointIsAUsageError) {
    // The generated model brings its own tokenizer: -z alone would be ignored.
    const CommandResult r = run_llama_cl("check -z " + quote((std::filesystem::temp_directory_path() / "tok.bin").string()));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("llama-cl: -z: check without a checkpoint generates its model and the tokenizer", 0), 0u)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(Check, FastPromptPrecisionIsAUsageError) {
    // Every rung's bound is the reference's accuracy, which fast's single TF32 products do not keep.
    const CommandResult r = run_llama_cl("check --prompt-precision fast");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("llama-cl: --prompt-precision fast: check holds every rung to the reference's accuracy", 0), 0u)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(Check, UnknownRungIsAUsageError) {
    const CommandResult r = check_with_fault("rung:nope");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "llama-cl: LLAMACL_INJECT_FAULT=rung:nope: unknown rung; rungs: device, buffers, kernels:f32, "
                     "layer:f32, forward:f32, prefill:f32, generate:f32, grid-barrier:f32, kernels:f16, layer:f16, "
                     "forward:f16, prefill:f16, generate:f16, grid-barrier:f16, kernels:q8_0, layer:q8_0, "
                     "forward:q8_0, prefill:q8_0, generate:q8_0, grid-barrier:q8_0, bandwidth\n");
}

TEST(Check, RealCheckpointPassesWithTheRoofline) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    const CommandResult r = run_llama_cl("check " + quote((shared / "models" / "stories260K.bin").string()) + " -z " +
                                         quote((shared / "models" / "tok512.bin").string()) + " --plot " +
                                         quote((dir / "roofline.svg").string()));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "generate:f32"), "pass") << r.out;
    EXPECT_EQ(status_of(r.out, "generate:f16"), "pass") << r.out;
    EXPECT_EQ(status_of(r.out, "generate:q8_0"), "pass") << r.out;
    EXPECT_NE(rung_line(r.out, "bandwidth").find("measured by --plot's benchmark"), std::string::npos) << r.out;
    const std::string svg = read_file(dir / "roofline.svg");
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
    for (const char* part : {"whole token: ", "whole prompt (32 positions): ", "FMA "})
        EXPECT_NE(svg.find(part), std::string::npos) << part;
}

TEST(Check, MissingCheckpointIsABadFile) {
    const CommandResult r = run_llama_cl("check /nonexistent/model.bin");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("/nonexistent/model.bin"), std::string::npos) << r.err;
}

// A runtime option the device cannot honour (the token kernel runs no shape of work-groups of 8 with a
// work-item a row) fails the first rung that starts the runtime, naming the option rather than blaming the
// numbers.
TEST(Check, RuntimeThatCannotStartFailsTheLayerRungWithItsRemedy) {
    const CommandResult r = run_llama_cl("check --work-shape 1x8 --schedule token");
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_EQ(status_of(r.out, "kernels:f32"), "pass") << r.out;
    EXPECT_NE(r.out.find("check: FAILED at layer:f32: the runtime did not start: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--schedule token"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check: next: change or drop the option the message names"), std::string::npos) << r.out;
}

// A model the runtime cannot hold on the device is no fault of the port: an error before any rung, not a
// failed rung with a port's remedy.
TEST(Check, AModelTooLargeForTheDeviceIsAnErrorBeforeAnyRung) {
    const CommandResult r = run_llama_cl("check --max-device-memory 0.01");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("does not fit on the device"), std::string::npos) << r.err;
}

// The picture's file is made before the ladder, aside: a ladder that stops before the picture leaves no
// new file, and a file already there keeps its bytes.
TEST(Check, AFailedLadderLeavesThePlotPathAsItWas) {
    TempDir dir;
    const std::filesystem::path fresh = dir / "fresh.svg", kept = dir / "kept.svg";
    const CommandResult r = check_with_fault("rung:kernels:f32", " --plot " + quote(fresh.string()));
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
    std::ofstream(kept) << "an earlier picture";
    const CommandResult again = check_with_fault("rung:kernels:f32", " --plot " + quote(kept.string()));
    EXPECT_EQ(again.exit_code, 4) << again.out << again.err;
    EXPECT_EQ(read_file(kept), "an earlier picture");
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(Check, UnwritablePlotIsABadFileBeforeAnyRung) {
    const CommandResult r = run_llama_cl("check --plot /nonexistent/dir/r.svg");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "llama-cl: --plot: cannot create /nonexistent/dir/r.svg: " + std::string(std::strerror(ENOENT)) +
                         "; give a path in a writable directory\n");
}

// A device is not a file to replace: refused before any rung.
TEST(Check, APlotOnADeviceIsRefusedBeforeAnyRung) {
    const CommandResult r = run_llama_cl("check --weights f32 --plot /dev/full");
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "llama-cl: --plot: cannot write /dev/full: it exists and is not a regular file (a character "
                     "device); give the path of a file to write\n");
}

}  // namespace
