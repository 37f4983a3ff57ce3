#include "elf/native_functions.h"

#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>

#include <cctype>
#include <set>
#include <stdexcept>

#include "common/path.h"
#include "elf/elf_file.h"
#include "elf/probe_point.h"
#include "elf/return_points.h"
#include "elf/symbolizer.h"

namespace lotus::elf {

namespace {

// Identifier pieces of a glob ("at::_ops::copy_::call" -> at, _ops, copy_, call) that a mangled name must
// contain too: demangling 30,000 libtorch symbols per spec would make attach slow.
std::vector<std::string> literal_words(const std::string& glob)
{
    std::vector<std::string> words;
    std::string w;
    for (char c : glob + " ") {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
            w += c;
        } else {
            if (w.size() >= 3)
                words.push_back(w);
            w.clear();
        }
    }
    return words;
}

} // namespace

NativeSpec parse_native_spec(const std::string& text)
{
    auto colon = text.find(':');
    // The library part ends at the first ':' not followed by another ':' (C++ scopes use "::").
    while (colon != std::string::npos && colon + 1 < text.size() && text[colon + 1] == ':')
        colon = text.find(':', colon + 2);
    if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size())
        throw std::invalid_argument("--native wants LIBGLOB:SYMBOLGLOB (e.g. 'libjpeg*:jpeg_read_*'), got '" +
                                    text + "'");
    return {text.substr(0, colon), text.substr(colon + 1)};
}

bool library_wanted(const std::vector<NativeSpec>& specs, const std::string& path)
{
    std::string base = common::base_name(path);
    for (const auto& s : specs)
        if (fnmatch(s.library.c_str(), base.c_str(), 0) == 0)
            return true;
    return false;
}

std::vector<NativeFunction> resolve_native(const std::vector<NativeSpec>& specs, const std::string& path_in,
                                           const std::string& name)
{
    // The file itself, as /proc/PID/maps names it (a library is often opened through a symlink).
    char real[PATH_MAX];
    std::string path = !name.empty() ? name : realpath(path_in.c_str(), real) ? std::string(real) : path_in;
    std::string base = common::base_name(path);
    std::vector<const NativeSpec*> mine;
    for (const auto& s : specs)
        if (fnmatch(s.library.c_str(), base.c_str(), 0) == 0)
            mine.push_back(&s);
    std::vector<NativeFunction> out;
    if (mine.empty())
        return out;
    std::vector<std::vector<std::string>> words;
    for (const auto* s : mine)
        words.push_back(literal_words(s->symbol));
    ElfFile elf(name.empty() ? path : path_in);
    ReturnFinder returns(elf);
    std::set<uint64_t> seen;
    for (const auto& [raw, sym] : elf.functions()) {
        // GCC's cold part of a function (name.cold, name.cold.N) is its unlikely code moved away, entered by jumps
        // from the function, never called: no entry to probe.
        if (raw.ends_with(".cold") || raw.find(".cold.") != std::string::npos)
            continue;
        for (size_t i = 0; i < mine.size(); i++) {
            bool maybe = true;
            for (const auto& w : words[i])
                maybe = maybe && raw.find(w) != std::string::npos;
            if (!maybe)
                continue;
            std::string name = demangle(raw);
            if (fnmatch(mine[i]->symbol.c_str(), name.c_str(), 0) != 0 &&
                fnmatch(mine[i]->symbol.c_str(), raw.c_str(), 0) != 0)
                continue;
            auto off = elf.file_offset(sym.value + cheap_probe_shift(elf, sym.value, sym.size));
            if (off && seen.insert(*off).second) {
                out.push_back({path, base, name, *off, static_cast<size_t>(mine[i] - specs.data()), {}, 0});
                if (auto rets = returns.find(sym.value, sym.size)) {
                    out.back().returns = std::move(rets->returns);
                    out.back().blind_exits = rets->blind_exits;
                }
            }
            break;
        }
    }
    return out;
}

} // namespace lotus::elf
