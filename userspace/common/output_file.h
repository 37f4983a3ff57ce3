// Output files that appear at their path only complete. Each is written to an unnamed temporary file in its
// destination directory (O_TMPFILE; a hidden O_EXCL name where the file system has none), fsynced and renamed
// into place by commit(). A run that fails or is killed leaves the previous file untouched and no partial one.
// A symbolic link at the path is never followed; FIFOs, devices (but /dev/null: nothing kept) and directories
// are refused when opened.
//
// Disk reserve (--disk-reserve): no output takes its file system's free space below a share of its size (5 % by
// default). Before buffered bytes go to the file, fstatvfs on its fd says whether they fit above the reserve (for
// gzip, their compressed size). An output whose writer can complete it (allow_cut) is then cut: it stops growing,
// and at commit gets its writer's tail (write_tail: the JSON's closing), for which room was promised beforehand.
// Any other output fails there instead, leaving the destination as it was.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/types.h>
#include <zlib.h>

namespace lotus::common {

// Told once, with one line, when an output fails after it was opened (a write, the fsync, the rename).
using OutputFailure = std::function<void(const std::string& line)>;

// The reserve an output keeps on its file system unless told (--disk-reserve's default), in percent of its size.
constexpr double kDefaultDiskReserve = 5;

// A file system's space as fstatvfs tells it, in bytes: what unprivileged writers may still use, and its size.
struct FsSpace {
    uint64_t avail = 0, total = 0;
};
// Where an output learns its file system's space (tests: a file system of their own). False: not known (no check).
using FsSpaceProbe = std::function<bool(int fd, FsSpace&)>;

// An output that stopped growing at the reserve: which (as the user named it), when (CLOCK_MONOTONIC) and why.
struct OutputCut {
    std::string what, path, why;
    uint64_t at_ns = 0;
};
// One run's outputs that were cut, in order: each run its own list (the agent runs several at once, and a job's
// summary names only its own outputs).
class OutputCuts {
public:
    void add(OutputCut c)
    {
        std::lock_guard lock(mu_);
        cuts_.push_back(std::move(c));
    }
    std::vector<OutputCut> list() const
    {
        std::lock_guard lock(mu_);
        return cuts_;
    }

private:
    mutable std::mutex mu_;
    std::vector<OutputCut> cuts_;
};

struct OutputOptions {
    bool gzip_by_name = true; // a name ending in .gz is written gzip-compressed
    std::string what;         // how the user named it in messages ("-o", "--record"): defaults to "output"
    unsigned mode = 0666;     // the file's permissions, less the umask (a record file: 0600)
    double reserve_pct = kDefaultDiskReserve; // --disk-reserve: free space it leaves its file system (0: none)
    OutputCuts* cuts = nullptr; // its run's list, where a cut is listed (none: said on stderr only)
    FsSpaceProbe space = {};    // empty: fstatvfs
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
    // This output may be cut at the reserve rather than fail there: its writer then completes it at commit with
    // at most about tail_bytes of write_tail, for which room is kept above every output's checks until then.
    void allow_cut(uint64_t tail_bytes);
    // Puts what is buffered in the file now (or cuts the output): a writer calls it before composing its tail, so
    // that the tail can say whether it was cut.
    void flush();
    // Written at commit after everything else, cut or not (the writer keeps it small: allow_cut's tail_bytes).
    void write_tail(std::string_view s) { tail_.append(s); }
    bool cut() const { return cut_; }
    // Whether a tail of `bytes` fits above the reserve (with the room promised to this output's own tail).
    bool tail_fits(uint64_t bytes) const;
    // Flushes, fsyncs and renames into place. False when this output failed (reported once through the
    // failure callback); the destination then keeps what it had.
    bool commit();
    // Drops what was written; the destination keeps what it had.
    void abandon();
    bool failed() const { return failed_; }
    bool discards() const { return path_.empty(); }
    const std::string& path() const { return path_; }
    uint64_t bytes() const { return bytes_; }
    const OutputCuts* cuts() const { return cuts_; } // its run's list of cuts (null: none)

private:
    void fail(const std::string& doing, int err);
    void fail(const std::string& line);
    // Puts buf_ in the file (compressed first, for gzip). checked: only if it fits above the reserve, else it is
    // dropped and the output cut (or failed). finish: the end of the gzip stream. False: not written.
    bool push(bool checked, bool finish = false);
    bool write_fd(std::string_view data);
    int64_t room() const; // bytes that fit above the reserve and the promised tails; INT64_MAX: no limit
    void cut_here();
    void release_tail();
    std::string path_, dir_, what_;
    OutputFailure on_failure_;
    mode_t mode_;
    double reserve_pct_;
    OutputCuts* cuts_;
    FsSpaceProbe space_;
    int fd_ = -1;
    std::string named_tmp_; // the temporary's name where O_TMPFILE is not supported
    struct DeflateEnd {
        void operator()(z_stream* z) const
        {
            deflateEnd(z);
            delete z;
        }
    };
    using Deflate = std::unique_ptr<z_stream, DeflateEnd>;
    Deflate zs_; // gzip
    std::string buf_, tail_;       // buf_: uncompressed
    uint64_t bytes_ = 0;
    uint64_t tail_promised_ = 0;
    bool failed_ = false, done_ = false, cuttable_ = false, cut_ = false;
};

// The uid and gid files created by lotus-bpf get: the invoking user's under sudo (SUDO_UID, SUDO_GID), else
// unchanged (-1).
std::pair<int, int> output_owner();

} // namespace lotus::common
