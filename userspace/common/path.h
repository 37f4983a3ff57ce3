// A path's last component.
#pragma once
#include <string>

namespace lotus::common {

// "/usr/lib/libc.so.6" -> "libc.so.6"; a name without a slash is returned as it is.
inline std::string base_name(const std::string& path)
{
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

} // namespace lotus::common
