#include "llamacl/option_suggestion.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <string_view>

namespace llamacl {

namespace {

// An option's name as compared: no leading dashes, lower case, '-' for '_'.
std::string bare_name(std::string_view spelling) {
    spelling.remove_prefix(std::min(spelling.find_first_not_of('-'), spelling.size()));
    std::string name;
    for (const char c : spelling) name += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
}

// Levenshtein distance: insertions, deletions and substitutions.
std::size_t edits(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// How near `typed` (a bare name) is to `spelling`: 0 the same, 1 a beginning of it, 2 + edits within the
// bound, else nullopt.
std::optional<std::size_t> nearness(const std::string& typed, const std::string& spelling) {
    constexpr std::size_t kShortestBeginning = 3;
    const std::string name = bare_name(spelling);
    if (name == typed) return 0;
    if (name.size() == 1 || typed.size() == 1) return std::nullopt;  // one letter is near every other
    if (typed.size() >= kShortestBeginning && name.starts_with(typed)) return 1;
    const std::size_t d = edits(typed, name);
    if (d <= std::max<std::size_t>(1, typed.size() / 3)) return 2 + d;
    return std::nullopt;
}

// A word that CLI11 reads as a value, not an option: "-1", "-0.5".
bool is_number(const std::string& word) {
    char* end = nullptr;
    std::strtod(word.c_str(), &end);
    return !word.empty() && *end == '\0';
}

}  // namespace

std::optional<std::string> nearest_option(const std::string& typed, const std::vector<std::vector<std::string>>& options) {
    const std::string bare = bare_name(typed);
    std::size_t best = std::numeric_limits<std::size_t>::max();
    const std::vector<std::string>* chosen = nullptr;
    for (const std::vector<std::string>& spellings : options)
        for (const std::string& spelling : spellings)
            if (const std::optional<std::size_t> n = nearness(bare, spelling); n && *n < best) {
                best = *n;
                chosen = &spellings;
            }
    if (!chosen) return std::nullopt;
    std::string joined;
    for (const std::string& spelling : *chosen) joined += (joined.empty() ? "" : "/") + spelling;
    return joined;
}

std::string see_help(const CLI::App& command) {
    return " (see llama-cl " + (command.get_parent() ? command.get_name() + " " : std::string()) + "--help)";
}

std::string unexpected_arguments_message(const CLI::App& command, const std::vector<std::string>& extras) {
    const std::string help = see_help(command);
    const std::string where = command.get_parent() ? command.get_name() + ": " : "";
    const auto option = std::find_if(extras.begin(), extras.end(), [](const std::string& word) {
        return word.size() > 1 && word[0] == '-' && !is_number(word);
    });
    if (option == extras.end())
        return where + "unexpected argument '" + (extras.empty() ? "" : extras.front()) + "'" + help;
    const std::string typed = option->substr(0, option->find('='));
    std::vector<std::vector<std::string>> options;
    for (const CLI::Option* o : command.get_options()) {
        std::vector<std::string> spellings;
        for (const std::string& s : o->get_snames()) spellings.push_back("-" + s);
        for (const std::string& l : o->get_lnames()) spellings.push_back("--" + l);
        if (!spellings.empty()) options.push_back(std::move(spellings));
    }
    const std::optional<std::string> nearest = nearest_option(typed, options);
    return where + "unknown option '" + typed + "'" + (nearest ? "; did you mean " + *nearest + "?" : "") + help;
}

}  // namespace llamacl
