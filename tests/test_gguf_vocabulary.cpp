// GGUF vocabularies through the Tokenizer: llama.cpp's own tokenizer tests for the SentencePiece path,
// Llama 3's chat template against llama.cpp's, and chat on a Llama-3-shaped model.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "llamacl/chat.hpp"
#include "llamacl/gguf_file.hpp"
#include "llamacl/tokenizer.hpp"
#include "gguf_models.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

std::vector<std::string> split(const std::string& text, const std::string& separator) {
    std::vector<std::string> pieces;
    for (std::size_t at = 0;;) {
        const std::size_t next = text.find(separator, at);
        pieces.push_back(text.substr(at, next - at));
        if (next == std::string::npos) return pieces;
        at = next + separator.size();
    }
}

std::vector<int> ids_of(const std::string& line) {
    std::vector<int> ids;
    std::istringstream in(line);
    for (int id; in >> id;) ids.push_back(id);
    return ids;
}

// Llama 2's vocabulary from GGUF encodes every string of llama.cpp's test as llama.cpp does, and as run.c
// does with the same vocabulary's tokenizer.bin.
TEST(GgufVocabulary, SentencePieceIsLlamaCppsAndRunCs) {
    LLAMACL_REQUIRE_SHARED(shared);
    const Tokenizer gguf = Tokenizer::from_gguf(GgufFile::open((shared / "models/gguf/ggml-vocab-llama-spm.gguf").string()), 0);
    const Tokenizer bin = Tokenizer::load((shared / "models/tokenizer.bin").string(), 0);
    EXPECT_FALSE(gguf.byte_level());
    EXPECT_EQ(gguf.size(), 32000);
    EXPECT_EQ(gguf.bos(), 1);
    EXPECT_EQ(gguf.eos(), 2);
    std::vector<std::string> inputs = split(read_file(shared / "reference/gguf/vocab-llama-spm.inp"), "\n__ggml_vocab_test__\n");
    const std::vector<std::string> outputs = split(read_file(shared / "reference/gguf/vocab-llama-spm.out"), "\n");
    inputs.pop_back();  // the empty piece after the last separator
    ASSERT_LE(inputs.size(), outputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const std::vector<int> got = gguf.encode(inputs[i], false, false);
        EXPECT_EQ(got, ids_of(outputs[i])) << "string " << i << ": \"" << inputs[i] << "\"";
        EXPECT_EQ(got, bin.encode(inputs[i], false, false)) << "string " << i;
    }
}

TEST(GgufVocabulary, ControlTokensDecodeToNothingAndEndGeneration) {
    LLAMACL_REQUIRE_SHARED(shared);
    const Tokenizer l3 = Tokenizer::from_gguf(GgufFile::open((shared / "models/gguf/l3-tiny-f32.gguf").string()), 0);
    EXPECT_TRUE(l3.byte_level());
    EXPECT_EQ(l3.bos(), 50257);
    EXPECT_EQ(l3.eos(), 50261);
    EXPECT_EQ(std::vector<int>(l3.generation_stops().begin(), l3.generation_stops().end()), std::vector<int>{50261});
    EXPECT_EQ(l3.decode(0, 50259), "");  // <|start_header_id|>
    EXPECT_EQ(l3.special("<|eot_id|>"), 50261);
    EXPECT_EQ(l3.special("Hello"), -1);
    // Control texts are plain text unless asked for.
    EXPECT_NE(l3.encode("<|eot_id|>", false, false), std::vector<int>{50261});
    EXPECT_EQ(l3.encode("<|eot_id|>", false, false, true), std::vector<int>{50261});
    EXPECT_EQ(detect_chat_template(l3.chat_template()), ChatTemplate::llama3);
    const Tokenizer spm = Tokenizer::from_gguf(GgufFile::open((shared / "models/gguf/stories260K-f32.gguf").string()), 0);
    EXPECT_EQ(spm.decode(0, 2), "");  // </s>
    EXPECT_EQ(std::vector<int>(spm.generation_stops().begin(), spm.generation_stops().end()), std::vector<int>{2});
    EXPECT_EQ(detect_chat_template(spm.chat_template()), ChatTemplate::llama2);
}

// chat-llama3.tsv: system (or none), user, assistant, user through llama.cpp's Llama 3 template.
TEST(GgufVocabulary, Llama3ChatTemplateIsLlamaCpps) {
    LLAMACL_REQUIRE_SHARED(shared);
    const Tokenizer l3 = Tokenizer::from_gguf(GgufFile::open((shared / "models/gguf/l3-tiny-f32.gguf").string()), 0);
    std::ifstream in(shared / "reference/gguf/chat-llama3.tsv");
    std::string line;
    std::getline(in, line);  // the header
    int rows = 0;
    while (std::getline(in, line)) {
        const std::vector<std::string> f = split(line, "\t");
        ASSERT_EQ(f.size(), 5u) << line;
        std::vector<ChatMessage> messages;
        if (!f[0].empty()) messages.push_back({"system", f[0]});
        messages.push_back({"user", f[1]});
        messages.push_back({"assistant", f[2]});
        messages.push_back({"user", f[3]});
        EXPECT_EQ(llama3_prompt(l3, messages, true), ids_of(f[4])) << line;
        ++rows;
    }
    EXPECT_EQ(rows, 3);
}

// A model that always predicts <|eot_id|>: every embedding is ones, the layers add nothing, and only the
// classifier's eot row is non-zero. Each reply then ends at once, so a conversation has every turn.
TEST(GgufVocabulary, Llama3ChatRunsTwoTurnsAndEndsCleanly) {
    LLAMACL_REQUIRE_SHARED(shared);
    const GgufFile vocabulary = GgufFile::open((shared / "models/gguf/l3-tiny-f32.gguf").string());
    const int eot = 50261;
    Config c{32, 64, 1, 2, 1, 50262, 256, false};
    TempDir dir;
    const auto model_path = dir / "eot.gguf";
    llama_gguf(c, vocabulary, [&](const std::string& name, std::uint64_t i) {
        if (name == "token_embd.weight" || name.find("norm") != std::string::npos) return 1.0f;
        if (name == "output.weight") return i / 32 == static_cast<std::uint64_t>(eot) ? 1.0f : 0.0f;
        return 0.0f;
    }).write(model_path);
    {
        std::ofstream input(dir / "in.txt");
        input << "Hello there\nWhat is a llama?\n";
    }
    const std::string model = quote(model_path.string());
    for (const char* backend : {"--backend cpu", "--backend opencl"}) {
        // (In a subshell: run_command gives the command itself an empty stdin.)
        std::string command = quote(LLAMACL_BINARY);
        command += " chat " + model + " -y 'You are terse.' -t 0 -n 200 " + backend;
        const CommandResult r = run_command("(" + command + " < " + quote((dir / "in.txt").string()) + ")");
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, "User: Assistant: \nUser: Assistant: \nUser: \n") << backend;
    }
    const CommandResult forced = run_llama_cl("chat " + model + " --chat-template llama2 -y x -i y -t 0 -n 40 --backend cpu");
    EXPECT_EQ(forced.exit_code, 0) << forced.err;
    const CommandResult bad = run_llama_cl("chat " + model + " --chat-template chatml -i y --backend cpu");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.err.find("--chat-template"), std::string::npos) << bad.err;
    EXPECT_TRUE(bad.out.empty());
    // Generation ends at the end of turn too: the prompt alone prints.
    const CommandResult g = run_llama_cl("generate " + model + " -t 0 -i Hello --backend cpu");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_EQ(g.out, "Hello\n");
}

// The Llama-3-shaped random model itself: its first reply runs to -n (a random model seldom ends a turn),
// where the conversation ends cleanly, the unread turn left in the input.
TEST(GgufVocabulary, Llama3ChatOnL3TinyEndsAtN) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    {
        std::ofstream input(dir / "in.txt");
        input << "Hello there\nWhat is a llama?\n";
    }
    std::string command = quote(LLAMACL_BINARY);
    command += " chat " + quote((shared / "models/gguf/l3-tiny-f32.gguf").string()) + " -y 'You are terse.' -t 0 -n 60 --backend cpu";
    const CommandResult r = run_command("(" + command + " < " + quote((dir / "in.txt").string()) + ")");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("User: Assistant: ", 0), 0u) << r.out;
    EXPECT_EQ(r.out.find("User: ", 1), std::string::npos) << r.out;
    EXPECT_GT(r.out.size(), 40u) << r.out;
    EXPECT_EQ(r.out.substr(r.out.size() - 2), "\n\n") << r.out;
}

}  // namespace
