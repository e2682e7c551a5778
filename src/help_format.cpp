#include "llamacl/help_format.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace llamacl {

namespace {

// Help narrower than this would wrap every description to a word a line.
constexpr std::size_t kNarrowest = 60;

}  // namespace

std::size_t help_width() {
    winsize size{};
    if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0)
        return std::max<std::size_t>(size.ws_col, kNarrowest);
    if (const char* columns = std::getenv("COLUMNS"); columns && std::atoi(columns) > 0)
        return std::max<std::size_t>(static_cast<std::size_t>(std::atoi(columns)), kNarrowest);
    return 80;
}

std::string wrap(const std::string& text, std::size_t width, std::size_t indent) {
    std::istringstream words(text);
    std::string out, line, word;
    while (words >> word) {
        if (!line.empty() && line.size() + 1 + word.size() > width) {
            out += line + "\n" + std::string(indent, ' ');
            line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
    }
    return out + line;
}

OptionGroup::OptionGroup(CLI::App& command, const std::string& name)
    : command_(command), previous_(command.option_defaults()->get_group()) {
    command_.option_defaults()->group(name);
}

OptionGroup::~OptionGroup() { command_.option_defaults()->group(previous_); }

void set_examples(CLI::App& command, const std::array<std::string, 3>& examples) {
    std::string footer = "Examples:";
    for (const std::string& example : examples) footer += "\n  " + example;
    command.footer(footer);
}

HelpFormatter::HelpFormatter(std::size_t width) : width_(width) {
    column_width(30);
    label("Subcommands", "Commands");
    label("SUBCOMMAND", "COMMAND");
}

// "  NAME  description", the description in its column; a name that fills the column puts it on the next line.
std::string HelpFormatter::entry(const std::string& name, const std::string& description) const {
    const std::size_t column = get_column_width();
    std::string out = "  " + name;
    if (description.empty()) return out + "\n";
    out += out.size() + 1 < column ? std::string(column - out.size(), ' ') : "\n" + std::string(column, ' ');
    return out + wrap(description, width_ - column, column) + "\n";
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
    return entry(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    // CLI11's names: "TEXT:{auto,opencl,cpu}", "INT:INTEGER", "FLOAT:NUMBER", "TEXT:TEXT"; none for a flag.
    const std::string type = opt->get_type_name();
    if (opt->get_positional() || type.empty()) return "";
    if (const std::size_t choices = type.find('{'); choices != std::string::npos) return " " + type.substr(choices);
    if (type.starts_with("INT")) return " N";
    if (type.starts_with("FLOAT")) return " NUMBER";
    return " TEXT";
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
    const std::string& by_default = opt->get_default_str();
    return opt->get_description() + (by_default.empty() ? "" : " (default: " + by_default + ")");
}

std::string HelpFormatter::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const {
    // CLI11 puts a blank line both after a group and before the next.
    std::string help = Formatter::make_help(app, std::move(name), mode);
    for (std::size_t at; (at = help.find("\n\n\n")) != std::string::npos;) help.erase(at, 1);
    return help;
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
    return entry(sub->get_display_name(true), sub->get_description());
}

std::string HelpFormatter::make_description(const CLI::App* app) const {
    const std::string& description = app->get_description();
    return description.empty() ? "" : wrap(description, width_, 0) + "\n";
}

}  // namespace llamacl
