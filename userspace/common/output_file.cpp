#include "output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <mutex>
#include <stdexcept>

#include "common/clock.h"

namespace lotus::common {

namespace {

constexpr size_t kBufferBytes = 256 << 10;

bool is_gz(const std::string& path) { return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0; }

const char* kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m) || S_ISBLK(m))
        return "a device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

std::string parent_dir(const std::string& path)
{
    auto slash = path.rfind('/');
    if (slash == std::string::npos)
        return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path)
{
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A hidden name next to the destination, unique to this process.
std::string temp_name(const std::string& dir, const std::string& base)
{
    static std::atomic<unsigned> seq{0};
    return fmt::format("{}/.{}.lotus-{}-{}", dir, base, getpid(), seq++);
}

// Process-wide by nature: the disks are the process's, whichever run writes (the agent runs several). Tail bytes
// promised to cuttable outputs not yet committed, all file systems together (a little conservative where they
// are on different ones; they are small).
std::atomic<uint64_t> g_promised{0};

bool fs_space(int fd, FsSpace& space)
{
    struct statvfs v{};
    if (fstatvfs(fd, &v) != 0 || v.f_blocks == 0)
        return false;
    space = {static_cast<uint64_t>(v.f_bavail) * v.f_frsize, static_cast<uint64_t>(v.f_blocks) * v.f_frsize};
    return true;
}

// The mount point of dir's file system (dir itself where it cannot tell): how the user knows it.
std::string mount_point(const std::string& dir)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p = fs::canonical(dir, ec);
    struct stat st{}, up{};
    if (ec || stat(p.c_str(), &st) != 0)
        return dir;
    while (p != p.root_path() && stat(p.parent_path().c_str(), &up) == 0 && up.st_dev == st.st_dev)
        p = p.parent_path();
    return p.string();
}

mode_t current_umask()
{
    mode_t m = umask(022);
    umask(m);
    return m;
}

} // namespace

std::pair<int, int> output_owner()
{
    if (geteuid() != 0)
        return {-1, -1};
    auto id = [](const char* name) {
        const char* v = getenv(name);
        if (!v || !*v)
            return -1;
        char* end = nullptr;
        long n = strtol(v, &end, 10);
        return *end || n < 0 || n > 0x7fffffff ? -1 : static_cast<int>(n);
    };
    return {id("SUDO_UID"), id("SUDO_GID")};
}

OutputFile::OutputFile(const std::string& path, OutputOptions options, OutputFailure on_failure)
    : path_(path), what_(options.what.empty() ? "output" : options.what), on_failure_(std::move(on_failure)),
      mode_(options.mode & 0777), reserve_pct_(options.reserve_pct), cuts_(options.cuts), space_(std::move(options.space))
{
    if (path_ == "/dev/null") // the one device that means "keep nothing": not opened at all
        path_.clear();
    if (path_.empty())
        return;
    auto refuse = [&](const std::string& why) { return std::runtime_error(fmt::format("cannot write {} {}: {}", what_, path_, why)); };
    struct stat st{};
    if (lstat(path_.c_str(), &st) == 0) {
        if (S_ISLNK(st.st_mode))
            throw refuse("it is a symbolic link, and lotus-bpf never writes through one (remove it or name the real file)");
        if (!S_ISREG(st.st_mode))
            throw refuse(fmt::format("it is {}; lotus-bpf writes regular files only", kind_of(st.st_mode)));
    } else if (errno != ENOENT) {
        throw refuse(strerror(errno));
    } else if (!path_.empty() && path_.back() == '/') {
        throw refuse("it names a directory");
    }
    dir_ = parent_dir(path_);
    // Unnamed until complete: nothing appears at all if the run dies.
    fd_ = open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, mode_);
    if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        for (int attempt = 0; fd_ < 0 && attempt < 100; attempt++) {
            named_tmp_ = temp_name(dir_, base_name(path_));
            fd_ = open(named_tmp_.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC,
                       mode_ & ~current_umask());
            if (fd_ < 0 && errno != EEXIST)
                break;
        }
        if (fd_ < 0)
            named_tmp_.clear();
    }
    if (fd_ < 0)
        throw refuse(strerror(errno));
    auto [uid, gid] = output_owner();
    if ((uid >= 0 || gid >= 0) && fchown(fd_, uid, gid) != 0) {
        int err = errno;
        abandon();
        throw refuse(fmt::format("cannot give it to the sudo user ({})", strerror(err)));
    }
    if (options.gzip_by_name && is_gz(path_)) {
        // Compressed here, not by gzFile: what reaches the file must be known (and taken back) before it is
        // written, for the reserve. windowBits 15 + 16: a gzip header and trailer, as gzip -6 writes.
        zs_.reset(new z_stream{});
        if (deflateInit2(zs_.get(), 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            zs_.reset();
            abandon();
            throw refuse(strerror(ENOMEM));
        }
    }
    if (room() < 0) // said now, not only when the run ends: the user may free space or choose another place
        fmt::print(stderr, "lotus-bpf: warning: {} {}: free space on {} is already below the {:g} % reserve "
                           "(--disk-reserve): nothing more will be written there\n",
                   what_, path_, mount_point(dir_), reserve_pct_);
}

OutputFile::~OutputFile()
{
    if (!done_)
        abandon();
}

void OutputFile::fail(const std::string& doing, int err)
{
    fail(fmt::format("{} {}: {} failed: {}; that file is left as it was, the other outputs go on", what_, path_, doing,
                     strerror(err ? err : EIO)));
}

void OutputFile::fail(const std::string& line)
{
    if (failed_)
        return;
    failed_ = true;
    abandon(); // frees the space (a full disk) at once
    if (on_failure_)
        on_failure_(line);
    else
        fmt::print(stderr, "lotus-bpf: {}\n", line);
}

int64_t OutputFile::room() const
{
    double pct = reserve_pct_;
    FsSpace space;
    if (pct <= 0 || !(space_ ? space_(fd_, space) : fs_space(fd_, space)))
        return INT64_MAX;
    auto reserve = static_cast<uint64_t>(std::ceil(static_cast<double>(space.total) * pct / 100));
    // One page more than asked: a file system allocates whole blocks.
    return static_cast<int64_t>(space.avail) - static_cast<int64_t>(reserve + g_promised.load() + 4096);
}

bool OutputFile::tail_fits(uint64_t bytes) const
{
    if (path_.empty() || fd_ < 0)
        return true;
    return room() + static_cast<int64_t>(tail_promised_) >= static_cast<int64_t>(bytes);
}

void OutputFile::allow_cut(uint64_t tail_bytes)
{
    cuttable_ = true;
    if (path_.empty() || done_)
        return;
    release_tail();
    tail_promised_ = tail_bytes;
    g_promised += tail_bytes;
}

void OutputFile::release_tail()
{
    g_promised -= tail_promised_;
    tail_promised_ = 0;
}

void OutputFile::cut_here()
{
    buf_.clear();
    std::string why = fmt::format("free space on {} would fall below {:g} %", mount_point(dir_), reserve_pct_);
    if (!cuttable_) {
        fail(fmt::format("{} {}: not written: {} (--disk-reserve); the other outputs go on", what_, path_, why));
        return;
    }
    cut_ = true;
    if (cuts_)
        cuts_->add({what_, path_, why, common::monotonic_ns()});
    fmt::print(stderr, "{}lotus-bpf: {} {}: cut: {} (--disk-reserve); it keeps what it had, completed, and the other "
                       "outputs go on\n",
               isatty(STDERR_FILENO) ? "\r\033[K" : "", what_, path_, why);
}

bool OutputFile::write_fd(std::string_view data)
{
    size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::write(fd_, data.data() + off, data.size() - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fail("writing", n < 0 ? errno : ENOSPC);
            return false;
        }
        off += static_cast<size_t>(n);
    }
    return true;
}

bool OutputFile::push(bool checked, bool finish)
{
    if (failed_ || (buf_.empty() && !finish))
        return !failed_;
    int64_t fits = checked ? room() : INT64_MAX;
    std::string packed;
    std::string_view out = buf_;
    if (zs_) {
        // Near the reserve, the stream's state before this buffer is kept, to go back to if it does not fit (a
        // dropped piece of a deflate stream would make the rest unreadable).
        Deflate before;
        if (fits < static_cast<int64_t>(deflateBound(zs_.get(), buf_.size()) + 64)) {
            before.reset(new z_stream{});
            if (deflateCopy(before.get(), zs_.get()) != Z_OK) {
                fail("compressing", ENOMEM);
                return false;
            }
        }
        // A sync flush after each buffer: everything given so far is in `packed`, nothing left inside zlib.
        zs_->next_in = reinterpret_cast<Bytef*>(buf_.data());
        zs_->avail_in = static_cast<uInt>(buf_.size());
        int rc = Z_OK;
        do {
            char chunk[1 << 16];
            zs_->next_out = reinterpret_cast<Bytef*>(chunk);
            zs_->avail_out = sizeof(chunk);
            rc = deflate(zs_.get(), finish ? Z_FINISH : Z_SYNC_FLUSH);
            packed.append(chunk, sizeof(chunk) - zs_->avail_out);
        } while (rc == Z_OK && (zs_->avail_out == 0 || (finish && rc != Z_STREAM_END)));
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
            fail("compressing", EIO);
            return false;
        }
        out = packed;
        if (static_cast<int64_t>(out.size()) > fits && before)
            zs_ = std::move(before);
    }
    if (static_cast<int64_t>(out.size()) > fits) {
        cut_here();
        return false;
    }
    if (!write_fd(out))
        return false;
    buf_.clear();
    return true;
}

void OutputFile::write(std::string_view s)
{
    if (s.empty() || path_.empty() || failed_ || done_ || cut_)
        return;
    bytes_ += s.size();
    buf_.append(s);
    if (buf_.size() >= kBufferBytes)
        push(true);
}

void OutputFile::flush()
{
    if (!path_.empty() && !done_ && !cut_)
        push(true);
}

bool OutputFile::commit()
{
    if (path_.empty() || done_)
        return !failed_;
    flush(); // may cut it (or fail it, where it cannot be cut)
    buf_ = std::move(tail_); // the writer's closing, cut or not: its room was promised
    if (failed_ || !push(false, true))
        return false;
    zs_.reset();
    release_tail();
    if (fsync(fd_) != 0) {
        fail("fsync", errno);
        return false;
    }
    std::string placed = named_tmp_;
    if (placed.empty()) {
        // Give the unnamed file a hidden name next to the destination, then rename it over the destination
        // (linkat cannot replace a file; rename does, atomically, and never follows a link at the path).
        std::string proc = fmt::format("/proc/self/fd/{}", fd_);
        for (int attempt = 0; attempt < 100; attempt++) {
            placed = temp_name(dir_, base_name(path_));
            if (linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, placed.c_str(), AT_SYMLINK_FOLLOW) == 0 ||
                linkat(fd_, "", AT_FDCWD, placed.c_str(), AT_EMPTY_PATH) == 0)
                break;
            if (errno != EEXIST) {
                fail("naming the file", errno);
                return false;
            }
        }
    }
    if (rename(placed.c_str(), path_.c_str()) != 0) {
        int err = errno;
        unlink(placed.c_str());
        named_tmp_.clear();
        fail(err == EISDIR ? "renaming into place (a directory is now there)" : "renaming into place", err);
        return false;
    }
    named_tmp_.clear();
    ::close(fd_);
    fd_ = -1;
    done_ = true;
    int dfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { // the rename itself survives a crash
        fsync(dfd);
        ::close(dfd);
    }
    return true;
}

void OutputFile::abandon()
{
    done_ = true;
    release_tail();
    zs_.reset();
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    if (!named_tmp_.empty()) {
        unlink(named_tmp_.c_str());
        named_tmp_.clear();
    }
    buf_.clear();
    tail_.clear();
}

} // namespace lotus::common
