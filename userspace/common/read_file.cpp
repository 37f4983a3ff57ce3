#include "read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include "unique_fd.h"

namespace lotus::common {

std::optional<std::string> read_file(const std::string& path)
{
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        return std::nullopt;
    std::string out;
    char buf[16384];
    ssize_t n;
    while ((n = read(fd.get(), buf, sizeof(buf))) > 0)
        out.append(buf, static_cast<size_t>(n));
    if (n < 0)
        return std::nullopt;
    return out;
}

} // namespace lotus::common
