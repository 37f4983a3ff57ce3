#include "output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace lotus::exporter {

static bool is_gz(const std::string& path) { return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0; }

OutputFile::OutputFile(const std::string& path) : path_(path)
{
    if (is_gz(path)) {
        gz_ = gzopen(path.c_str(), "wb6");
        if (!gz_)
            throw std::runtime_error("cannot write " + path + ": " + strerror(errno ? errno : EIO));
    } else {
        plain_ = fopen(path.c_str(), "wb");
        if (!plain_)
            throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
    }
}

OutputFile::~OutputFile()
{
    try {
        close();
    } catch (...) {
    }
}

void OutputFile::write(std::string_view s)
{
    if (s.empty() || failed_)
        return;
    if (gz_)
        failed_ = gzwrite(gz_, s.data(), static_cast<unsigned>(s.size())) != static_cast<int>(s.size());
    else if (plain_)
        failed_ = fwrite(s.data(), 1, s.size(), plain_) != s.size();
}

void OutputFile::close()
{
    bool err = failed_;
    if (gz_) {
        err |= gzclose(gz_) != Z_OK;
        gz_ = nullptr;
    }
    if (plain_) {
        err |= fclose(plain_) != 0;
        plain_ = nullptr;
    }
    if (err && !failed_) {
        failed_ = true;
        throw std::runtime_error("error writing " + path_);
    }
    if (err)
        throw std::runtime_error("error writing " + path_);
}

void check_writable(const std::string& path)
{
    // Really create it: permission bits do not stop root, a read-only or special file system does.
    bool existed = access(path.c_str(), F_OK) == 0;
    if (std::filesystem::is_directory(path))
        throw std::runtime_error("cannot write " + path + ": is a directory");
    FILE* f = fopen(path.c_str(), "ab");
    if (!f)
        throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
    fclose(f);
    if (!existed)
        unlink(path.c_str());
}

} // namespace lotus::exporter
