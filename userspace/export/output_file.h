// Output files that appear at their path only complete. Each is written to an unnamed temporary file in its
// destination directory (O_TMPFILE; a hidden O_EXCL name where the file system has none), fsynced and renamed
// into place by commit(). A run that fails or is killed leaves the previous file untouched and no partial one.
// A symbolic link at the path is never followed; FIFOs, devices (but /dev/null: nothing kept) and directories
// are refused when opened.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include <zlib.h>

namespace lotus::exporter {

// Told once, with one line, when an output fails after it was opened (a write, the fsync, the rename).
using OutputFailure = std::function<void(const std::string& line)>;

struct OutputOptions {
    bool gzip_by_name = true; // a name ending in .gz is written gzip-compressed
    std::string what;         // how the user named it in messages ("-o", "--record"): defaults to "output"
};

class OutputFile {
public:
    // Empty path or /dev/null: a sink that keeps nothing. Throws std::runtime_error with one line when the destination
    // cannot be used (a link, not a regular file, a missing or unwritable directory).
    OutputFile(const std::string& path, OutputOptions options = {}, OutputFailure on_failure = {});
    ~OutputFile(); // abandons the file unless committed
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    void write(std::string_view s);
    // Flushes, fsyncs and renames into place. False when this output failed (reported once through the
    // failure callback); the destination then keeps what it had.
    bool commit();
    // Drops what was written; the destination keeps what it had.
    void abandon();
    bool failed() const { return failed_; }
    bool discards() const { return path_.empty(); }
    const std::string& path() const { return path_; }
    uint64_t bytes() const { return bytes_; }

private:
    void fail(const std::string& doing, int err);
    bool flush_buffer();
    std::string path_, dir_, what_;
    OutputFailure on_failure_;
    int fd_ = -1;
    std::string named_tmp_; // the temporary's name where O_TMPFILE is not supported
    gzFile gz_ = nullptr;
    std::string buf_;
    uint64_t bytes_ = 0;
    bool failed_ = false, done_ = false;
};

// The uid and gid files created by lotus-bpf get: the invoking user's under sudo (SUDO_UID, SUDO_GID), else
// unchanged (-1).
std::pair<int, int> output_owner();

} // namespace lotus::exporter
