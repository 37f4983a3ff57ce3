#include "output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

namespace lotus::exporter {

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
    : path_(path), what_(options.what.empty() ? "output" : options.what), on_failure_(std::move(on_failure))
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
    fd_ = open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        for (int attempt = 0; fd_ < 0 && attempt < 100; attempt++) {
            named_tmp_ = temp_name(dir_, base_name(path_));
            fd_ = open(named_tmp_.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC,
                       0666 & ~current_umask());
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
        int dup_fd = fcntl(fd_, F_DUPFD_CLOEXEC, 0); // gzclose closes its own: ours is kept for fsync and link
        gz_ = dup_fd < 0 ? nullptr : gzdopen(dup_fd, "wb6");
        if (!gz_) {
            int err = errno ? errno : ENOMEM;
            if (dup_fd >= 0)
                ::close(dup_fd);
            abandon();
            throw refuse(strerror(err));
        }
    }
}

OutputFile::~OutputFile()
{
    if (!done_)
        abandon();
}

void OutputFile::fail(const std::string& doing, int err)
{
    if (failed_)
        return;
    failed_ = true;
    abandon(); // frees the space (a full disk) at once
    std::string line = fmt::format("{} {}: {} failed: {}; that file is left as it was, the other outputs go on", what_,
                                   path_, doing, strerror(err ? err : EIO));
    if (on_failure_)
        on_failure_(line);
    else
        fmt::print(stderr, "lotus-bpf: {}\n", line);
}

bool OutputFile::flush_buffer()
{
    size_t off = 0;
    while (off < buf_.size()) {
        ssize_t n = ::write(fd_, buf_.data() + off, buf_.size() - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fail(fmt::format("writing (after {} bytes)", bytes_ - buf_.size() + off), n < 0 ? errno : ENOSPC);
            return false;
        }
        off += static_cast<size_t>(n);
    }
    buf_.clear();
    return true;
}

void OutputFile::write(std::string_view s)
{
    if (s.empty() || path_.empty() || failed_ || done_)
        return;
    bytes_ += s.size();
    if (gz_) {
        if (gzwrite(gz_, s.data(), static_cast<unsigned>(s.size())) != static_cast<int>(s.size())) {
            int zerr = 0;
            gzerror(gz_, &zerr);
            fail(fmt::format("writing (after about {} bytes)", bytes_ - s.size()), zerr == Z_ERRNO ? errno : EIO);
        }
        return;
    }
    buf_.append(s);
    if (buf_.size() >= kBufferBytes)
        flush_buffer();
}

bool OutputFile::commit()
{
    if (path_.empty() || done_)
        return !failed_;
    if (gz_) {
        gzFile gz = gz_;
        gz_ = nullptr;
        errno = 0;
        if (gzclose(gz) != Z_OK) {
            fail("writing", errno);
            return false;
        }
    } else if (!flush_buffer()) {
        return false;
    }
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
    if (gz_) {
        gzclose(gz_); // may fail on the same full disk: nothing of it reaches the destination anyway
        gz_ = nullptr;
    }
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    if (!named_tmp_.empty()) {
        unlink(named_tmp_.c_str());
        named_tmp_.clear();
    }
    buf_.clear();
}

} // namespace lotus::exporter
