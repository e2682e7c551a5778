#pragma once
// --help as llama-cl prints it: options in their groups, each description wrapped to the terminal with its
// default at the end, a value's placeholder (N, NUMBER, TEXT, {a,b}) instead of CLI11's type tags, and a
// command's examples last.
#include <CLI/CLI.hpp>
#include <array>
#include <cstddef>
#include <string>

namespace llamacl {

class HelpFormatter : public CLI::Formatter {
public:
    explicit HelpFormatter(std::size_t width);
    std::string make_option(const CLI::Option* opt, bool is_positional) const override;
    std::string make_option_opts(const CLI::Option* opt) const override;
    std::string make_option_desc(const CLI::Option* opt) const override;
    std::string make_subcommand(const CLI::App* sub) const override;
    std::string make_description(const CLI::App* app) const override;
    std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;

private:
    std::string entry(const std::string& name, const std::string& description) const;
    std::size_t width_;
};

// The columns help wraps to: the terminal's where stdout is one, else $COLUMNS, else 80.
std::size_t help_width();

// `text`'s words in lines of at most `width` characters (a longer word alone on its line), every line
// after the first indented by `indent` spaces.
std::string wrap(const std::string& text, std::size_t width, std::size_t indent);

// The help's groups of the options that several commands share.
inline constexpr const char* kModelGroup = "Model";
inline constexpr const char* kWhereItRuns = "Where it runs";

// Options added to a command while this lives go under `name` in its help.
class OptionGroup {
public:
    OptionGroup(CLI::App& command, const std::string& name);
    ~OptionGroup();
    OptionGroup(const OptionGroup&) = delete;
    OptionGroup& operator=(const OptionGroup&) = delete;

private:
    CLI::App& command_;
    std::string previous_;
};

// Sets the end of `command`'s help: these three command lines, under "Examples:".
void set_examples(CLI::App& command, const std::array<std::string, 3>& examples);

}  // namespace llamacl
