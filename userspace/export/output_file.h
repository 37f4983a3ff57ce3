// A file written plainly or gzip-compressed (zlib) when its name ends in .gz.
#pragma once
#include <string>
#include <string_view>

#include <zlib.h>

namespace lotus::exporter {

class OutputFile {
public:
    // Throws std::runtime_error with a one-line reason if the path cannot be created.
    explicit OutputFile(const std::string& path);
    ~OutputFile();
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    void write(std::string_view s);
    // Flushes and closes; throws on a write error (disk full).
    void close();
    const std::string& path() const { return path_; }

private:
    std::string path_;
    FILE* plain_ = nullptr;
    gzFile gz_ = nullptr;
    bool failed_ = false;
};

// Throws std::runtime_error if a file at `path` could not be created (checked before attaching).
void check_writable(const std::string& path);

} // namespace lotus::exporter
