#include "remote_memory.h"

#include <sys/uio.h>

namespace lotus::target {

bool read_remote(int pid, uint64_t addr, void* buf, size_t len)
{
    iovec local{buf, len};
    iovec remote{reinterpret_cast<void*>(addr), len};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(len);
}

std::optional<uint64_t> read_remote_ptr(int pid, uint64_t addr)
{
    uint64_t v = 0;
    if (!read_remote(pid, addr, &v, sizeof(v)))
        return std::nullopt;
    return v;
}

std::optional<std::string> read_remote_ascii(int pid, uint64_t str, const lotus_py_layout& layout)
{
    uint32_t state = 0;
    int64_t length = 0;
    if (!read_remote(pid, str + layout.unicode_state, &state, sizeof(state)) ||
        !read_remote(pid, str + layout.unicode_length, &length, sizeof(length)))
        return std::nullopt;
    if (!(state & (1u << layout.unicode_ascii_bit)) || length < 0 || length > 4096)
        return std::nullopt;
    std::string s(static_cast<size_t>(length), '\0');
    if (length && !read_remote(pid, str + layout.unicode_ascii_data, s.data(), s.size()))
        return std::nullopt;
    return s;
}

std::optional<std::vector<std::string>> read_local_names(int pid, uint64_t code, const lotus_py_layout& layout)
{
    if (layout.code_localsplusnames < 0)
        return std::nullopt;
    auto tuple = read_remote_ptr(pid, code + layout.code_localsplusnames);
    if (!tuple)
        return std::nullopt;
    int64_t n = 0;
    if (!read_remote(pid, *tuple + layout.tuple_size, &n, sizeof(n)) || n < 0 || n > 4096)
        return std::nullopt;
    std::vector<uint64_t> items(static_cast<size_t>(n));
    if (n && !read_remote(pid, *tuple + layout.tuple_items, items.data(), items.size() * sizeof(uint64_t)))
        return std::nullopt;
    std::vector<std::string> names;
    for (auto item : items) {
        auto s = read_remote_ascii(pid, item, layout);
        names.push_back(s.value_or(""));
    }
    return names;
}

} // namespace lotus::target
