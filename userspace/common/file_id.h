// Which file an open descriptor is: its device, inode and last change. A path names different files over time (a
// package upgrade replaces a library; a freed inode number is given to a new file); an identity taken from the
// descriptor does not.
#pragma once
#include <sys/stat.h>

#include <compare>
#include <cstdint>
#include <optional>

namespace lotus::common {

struct FileId {
    uint64_t dev = 0, ino = 0;
    int64_t mtime_ns = 0; // a reused inode number is another file, written at another time
    uint64_t size = 0;
    auto operator<=>(const FileId&) const = default;
};

inline std::optional<FileId> file_id(int fd)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return std::nullopt;
    return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                  static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
                  static_cast<uint64_t>(st.st_size)};
}

} // namespace lotus::common
