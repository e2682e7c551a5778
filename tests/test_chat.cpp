// chat: run.c's chat-mode outputs byte for byte on the CPU reference and OpenCL, its turn structure (the
// newline at each sampled EOS, the position after EOS that runs EOS), one KV cache for the conversation,
// and where it does better than run.c (the end of the input, prompts past 512 bytes).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "llamacl/chat.hpp"
#include "llamacl/error.hpp"
#include "llamacl/generate.hpp"
#include "models.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

struct ChatCase {
    std::string id, model, tokenizer, temperature, topp, seed, steps, system, user, stdin_file, expected;
};

std::vector<ChatCase> load_chat_cases(const std::filesystem::path& shared) {
    std::ifstream in(shared / "reference" / "cases-chat.tsv");
    std::vector<ChatCase> cases;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::stringstream fields(line);
        for (std::string field; std::getline(fields, field, '\t');) f.push_back(field);
        f.resize(11);
        cases.push_back({f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]});
    }
    return cases;
}

// Runs llama-cl with `args` and standard input from `input` (run_command's own </dev/null applies to the
// subshell around it).
CommandResult run_with_input(const std::string& args, const std::filesystem::path& input) {
    return run_command(std::string("('") + LLAMACL_BINARY + "' " + args + " < " + quote(input.string()) + ")");
}

// Runs `llama-cl chat` on a case: run.c's flags, stdin from the case's file or empty.
CommandResult run_case(const std::filesystem::path& shared, const ChatCase& c, const std::string& extra) {
    const auto models = shared / "models";
    std::string args = "chat " + quote((models / c.model).string()) + " -z " + quote((models / c.tokenizer).string()) +
                       " -t " + c.temperature + " -p " + c.topp + " -s " + c.seed + " -n " + c.steps + " " + extra;
    if (!c.system.empty()) args += " -y " + quote(c.system);
    if (!c.user.empty()) args += " -i " + quote(c.user);
    return run_with_input(args, c.stdin_file.empty() ? "/dev/null" : shared / "reference" / c.stdin_file);
}

void expect_every_case(const std::string& backend) {
    LLAMACL_REQUIRE_SHARED(shared);
    const auto cases = load_chat_cases(shared);
    ASSERT_FALSE(cases.empty());
    for (const ChatCase& c : cases) {
        const CommandResult r = run_case(shared, c, backend);
        EXPECT_EQ(r.exit_code, 0) << c.id << ": " << r.err;
        EXPECT_EQ(r.out, read_file(shared / "reference" / c.expected)) << "case " << c.id << " " << backend;
    }
}

// A model whose every position's logits peak at one token: EOS after `marker`, else `marker`. It records
// the token and position of every call.
class ScriptedModel : public Forward {
public:
    ScriptedModel(int vocab_size, int marker) : logits_(vocab_size), marker_(marker) {}
    std::span<float> forward(int token, int pos) override {
        calls.emplace_back(token, pos);
        std::fill(logits_.begin(), logits_.end(), 0.0f);
        logits_[token == marker_ ? 2 : marker_] = 1.0f;
        return logits_;
    }
    std::vector<std::pair<int, int>> calls;

private:
    std::vector<float> logits_;
    int marker_;
};

struct Conversation {
    std::string out;
    ChatStats stats;
};

// Runs chat() greedily with `input` as standard input.
Conversation converse(Forward& model, const Tokenizer& tokenizer, ChatOptions options, const std::string& input) {
    std::FILE* in = std::tmpfile();
    std::FILE* out = std::tmpfile();
    std::fwrite(input.data(), 1, input.size(), in);
    std::rewind(in);
    Sampler sampler(options.vocab_size, 0.0f, 0.9f, 1);
    Conversation c;
    c.stats = chat(model, tokenizer, sampler, options, in, out);
    std::rewind(out);
    for (int ch; (ch = std::fgetc(out)) != EOF;) c.out += static_cast<char>(ch);
    std::fclose(in);
    std::fclose(out);
    return c;
}

struct ScriptedChat : ::testing::Test {
    TempDir dir;
    Tokenizer tokenizer = [this] {
        write_synthetic_tokenizer((dir / "tok.bin").string(), 300);
        return Tokenizer::load((dir / "tok.bin").string(), 300);
    }();
    const int marker = tokenizer.encode("Z", false, false).back();  // 'Z' alone, the dummy prefix first
    ScriptedModel model{300, marker};
    ChatOptions options = [] {
        ChatOptions o;
        o.steps = o.seq_len = 1000;
        o.vocab_size = 300;
        return o;
    }();
    std::vector<int> turn(const std::string& rendered) { return tokenizer.encode(rendered, true, false); }
};

}  // namespace

TEST(ChatCpu, EveryReferenceCaseIsByteIdentical) { expect_every_case("--backend cpu"); }

TEST(ChatOpencl, EveryReferenceCaseIsByteIdentical) { expect_every_case("--backend opencl"); }

TEST_F(ScriptedChat, TurnsKeepOneKvCacheAndRunTheTokenAfterEos) {
    options.system_prompt = "be kind";
    const Conversation c = converse(model, tokenizer, options, "hello\nmore\nbye\n");
    // Each turn: the reply's one marker, a newline for the EOS after it, then run.c's extra position
    // that runs EOS and prints the token it samples (the marker again).
    EXPECT_EQ(c.out, "User: Assistant: Z\nZUser: Assistant: Z\nZUser: Assistant: Z\nZUser: \n");
    EXPECT_EQ(c.stats.turns, 3);
    // Positions 0, 1, 2, ... each run once: every turn goes on from the last, nothing is run again.
    std::vector<int> fed;
    for (const std::string rendered : {"[INST] <<SYS>>\nbe kind\n<</SYS>>\n\nhello [/INST]",
                                        "[INST] more [/INST]", "[INST] bye [/INST]"}) {
        const std::vector<int> prompt = turn(rendered);
        fed.insert(fed.end(), prompt.begin(), prompt.end());
        fed.push_back(marker);
        fed.push_back(2);
    }
    ASSERT_EQ(model.calls.size(), fed.size());
    EXPECT_EQ(c.stats.positions, static_cast<int>(fed.size()));
    for (std::size_t i = 0; i < fed.size(); ++i) {
        EXPECT_EQ(model.calls[i].second, static_cast<int>(i));
        EXPECT_EQ(model.calls[i].first, fed[i]) << "position " << i;
    }
}

TEST_F(ScriptedChat, EosSampledInsideThePromptPrintsANewlineAsRunCDoes) {
    options.system_prompt = "";
    options.user_prompt = "aZb";  // the position that runs 'Z' samples EOS, which run.c answers with "\n"
    const Conversation c = converse(model, tokenizer, options, "");
    EXPECT_EQ(c.out, "Assistant: \nZ\nZUser: \n");
}

TEST_F(ScriptedChat, StepsCountEveryPositionOfTheConversation) {
    options.system_prompt = "";
    const int first = static_cast<int>(turn("[INST] one [/INST]").size()) + 2;
    options.steps = first + 3;  // the second turn's prompt runs into -n's end
    const Conversation c = converse(model, tokenizer, options, "one\ntwo\nthree\n");
    EXPECT_EQ(c.out, "User: Assistant: Z\nZUser: Assistant: \n");
    EXPECT_EQ(c.stats.positions, options.steps);
    EXPECT_EQ(model.calls.size(), static_cast<std::size_t>(options.steps));
}

TEST_F(ScriptedChat, EndOfInputEndsTheConversation) {
    // run.c reads an uninitialized buffer at an empty input and repeats its last prompt at the end of one.
    EXPECT_EQ(converse(model, tokenizer, options, "").out, "Enter system prompt (optional): \n");
    EXPECT_TRUE(model.calls.empty());
    const Conversation c = converse(model, tokenizer, options, "\nlast line without a newline");
    EXPECT_EQ(c.out, "Enter system prompt (optional): User: Assistant: Z\nZUser: \n");
    EXPECT_EQ(c.stats.turns, 1);
}

TEST_F(ScriptedChat, TheInputsEndStillAnswersTheTurnOfDashI) {
    // -i's turn is given: an input that ends before the system prompt is no system prompt, not the end.
    options.user_prompt = "hello";
    const Conversation c = converse(model, tokenizer, options, "");
    EXPECT_EQ(c.out, "Enter system prompt (optional): Assistant: Z\nZUser: \n");
    EXPECT_EQ(c.stats.turns, 1);
    ASSERT_FALSE(model.calls.empty());
    EXPECT_EQ(model.calls.front().first, turn("[INST] hello [/INST]").front());
}

TEST_F(ScriptedChat, ALineEndsAtANulByteAsRunCsCString) {
    options.system_prompt = "";
    static constexpr char kInput[] = "Hel\0lo world\nbye\n";
    const Conversation cut = converse(model, tokenizer, options, std::string(kInput, sizeof kInput - 1));
    const std::vector<std::pair<int, int>> cut_calls = model.calls;
    model.calls.clear();
    const Conversation plain = converse(model, tokenizer, options, "Hel\nbye\n");
    EXPECT_EQ(cut.out, plain.out);
    EXPECT_EQ(cut_calls, model.calls);
    EXPECT_EQ(cut.stats.turns, 2);
}

TEST_F(ScriptedChat, ALineLongerThanMinusNCanHoldIsRefusedAsItArrives) {
    options.system_prompt = "";
    options.steps = 10;  // of a context of 1000
    const std::size_t limit = 10 * static_cast<std::size_t>(tokenizer.max_token_length());
    try {
        converse(model, tokenizer, options, std::string(limit + 1, 'u'));
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "chat turn 1: a line of stdin longer than " + std::to_string(limit) +
                                             " bytes cannot fit the conversation's 10 positions (-n, at most "
                                             "seq_len) in tokens; give a shorter prompt");
    }
    EXPECT_TRUE(model.calls.empty());
}

TEST_F(ScriptedChat, PromptsPast512BytesArriveWhole) {
    options.seq_len = options.steps = 4000;
    options.system_prompt = std::string(700, 'y');
    const std::string user(1500, 'u');  // run.c's fgets would cut it into pieces of 511 bytes
    const Conversation c = converse(model, tokenizer, options, user + "\n");
    EXPECT_EQ(c.out, "User: Assistant: Z\nZUser: \n");
    const std::vector<int> prompt = turn("[INST] <<SYS>>\n" + std::string(700, 'y') + "\n<</SYS>>\n\n" + user + " [/INST]");
    ASSERT_EQ(model.calls.size(), prompt.size() + 2);
    for (std::size_t i = 0; i < prompt.size(); ++i) EXPECT_EQ(model.calls[i].first, prompt[i]) << i;
}

TEST_F(ScriptedChat, APromptLongerThanTheContextIsAnError) {
    options.seq_len = options.steps = 50;
    options.system_prompt = "";
    try {
        converse(model, tokenizer, options, std::string(100, 'u') + "\n");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.exit_code(), 1);
        EXPECT_NE(std::string(e.what()).find("chat turn 1: the prompt is"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("seq_len"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(model.calls.empty());
}

TEST(ChatCli, EndOfInputExitsZeroAndBadFlagsAreUsageErrors) {
    TempDir dir;
    const auto model = write_model(dir, small_config());
    const std::string base = "chat " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) + " --backend cpu";
    const CommandResult eof = run_llama_cl(base + " -y '' < /dev/null");
    EXPECT_EQ(eof.exit_code, 0) << eof.err;
    EXPECT_EQ(eof.out, "User: \n");
    for (const char* flags : {"-t -1", "-p 1.5", "-n -3", "-m story"}) {
        const CommandResult r = run_llama_cl(base + " " + flags + " < /dev/null");
        EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
        EXPECT_EQ(r.out, "") << flags;
    }
    // A stdin that cannot be read (a directory) is an error, not the end of the conversation.
    const CommandResult unreadable = run_with_input(base + " -y ''", "/");
    EXPECT_EQ(unreadable.exit_code, 1) << unreadable.err;
    EXPECT_EQ(unreadable.err, "llama-cl: chat turn 1: cannot read stdin (Is a directory)\n");
    // Refused before --backend auto's choice is printed: one line on stderr, nothing on stdout.
    const std::string auto_base = "chat " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string());
    for (const std::string& b : {base, auto_base}) {
        const CommandResult steps = run_llama_cl(b + " -n 3 -y '' -i 'a prompt of many tokens' < /dev/null");
        EXPECT_EQ(steps.exit_code, 2) << steps.err;
        EXPECT_EQ(steps.err.rfind("llama-cl: chat turn 1: the prompt is", 0), 0u) << steps.err;
        EXPECT_NE(steps.err.find("-n"), std::string::npos) << steps.err;
        EXPECT_EQ(std::count(steps.err.begin(), steps.err.end(), '\n'), 1) << steps.err;
        EXPECT_EQ(steps.out, "");
    }
}
