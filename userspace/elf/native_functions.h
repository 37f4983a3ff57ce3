// Which native functions get entry/return probes (--native LIBGLOB:SYMBOLGLOB, and a built-in set for the
// image pipeline), and where they are in a library file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lotus::elf {

struct NativeSpec {
    std::string library; // glob on the file's basename: "libjpeg*.so*", "_imaging*.so"
    std::string symbol;  // glob on the demangled name without parameters, or on the raw symbol name
};

// "LIBGLOB:SYMBOLGLOB"; the symbol part may itself hold "::" (C++). Throws std::invalid_argument.
NativeSpec parse_native_spec(const std::string& text);

struct NativeFunction {
    std::string path;     // the library file
    std::string library;  // its basename
    std::string name;     // demangled, without parameters
    uint64_t offset = 0;  // file offset of its entry (for the uprobe)
    size_t spec = 0;      // the index of the spec that selected it
    // File offsets of the return instructions its calls return by (ReturnFinder: its own, and those of the code
    // it jumps to); empty where none was found or its bytes do not decode whole: such a function is not probed
    // (its calls could never end a span).
    std::vector<uint64_t> returns;
    size_t blind_exits = 0; // its jumps no probe follows (a tail call into another library): calls left unended
};

// Whether a library path's basename matches some spec (so it is worth opening).
bool library_wanted(const std::vector<NativeSpec>& specs, const std::string& path);
// The functions of one library file that the specs select, each once. Throws std::runtime_error when the
// file is not a readable ELF file. `name`, where given, is the path the file is known by (the specs' library
// globs match its basename; NativeFunction::path and library come from it) when `path` is only a way to it
// (/proc/self/fd/N of a file opened once: the file read is the file probed).
std::vector<NativeFunction> resolve_native(const std::vector<NativeSpec>& specs, const std::string& path,
                                           const std::string& name = {});

} // namespace lotus::elf
