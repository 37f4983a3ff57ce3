#include "cpython/remote_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace lotus::cpython {

bool ProcessMemory::read(uint64_t addr, void* buf, size_t len) const
{
    if (!opened_) {
        opened_ = true;
        mem_.reset(open(("/proc/" + std::to_string(pid_) + "/mem").c_str(), O_RDONLY | O_CLOEXEC));
    }
    if (!mem_ || addr > static_cast<uint64_t>(INT64_MAX) - len)
        return false;
    // The kernel reads it as the process's page tables hold it (no pin, no copy), page by page into our buffer.
    return pread(mem_.get(), buf, len, static_cast<off_t>(addr)) == static_cast<ssize_t>(len);
}

std::optional<uint64_t> Memory::ptr(uint64_t addr) const
{
    uint64_t v = 0;
    if (!read(addr, &v, sizeof(v)))
        return std::nullopt;
    return v;
}

std::optional<std::string> read_ascii(const Memory& mem, uint64_t str, const lotus_py_layout& layout)
{
    uint32_t state = 0;
    int64_t length = 0;
    if (!mem.read(str + layout.unicode_state, &state, sizeof(state)) ||
        !mem.read(str + layout.unicode_length, &length, sizeof(length)))
        return std::nullopt;
    if (!(state & (1u << layout.unicode_ascii_bit)) || length < 0 || length > 4096)
        return std::nullopt;
    std::string s(static_cast<size_t>(length), '\0');
    if (length && !mem.read(str + layout.unicode_ascii_data, s.data(), s.size()))
        return std::nullopt;
    return s;
}

bool read_cstr(const Memory& mem, uint64_t addr, char* buf, size_t size)
{
    constexpr uint64_t kPage = 4096;
    size_t got = 0;
    while (addr && got + 1 < size) {
        size_t n = std::min<uint64_t>(size - 1 - got, kPage - (addr + got) % kPage);
        if (!mem.read(addr + got, buf + got, n))
            return false;
        if (memchr(buf + got, 0, n))
            return true;
        got += n;
    }
    if (!addr || !size)
        return false;
    buf[got] = 0;
    return true;
}

uint8_t read_unicode(const Memory& mem, uint64_t str, const lotus_py_layout& layout, char* buf, size_t size)
{
    uint32_t state = 0;
    if (!str || !size || !mem.read(str + layout.unicode_state, &state, sizeof(state)))
        return 0xff;
    if (state & (1u << layout.unicode_ascii_bit))
        return read_cstr(mem, str + layout.unicode_ascii_data, buf, size) ? 0 : 0xff;
    uint8_t kind = (state >> layout.unicode_kind_shift) & 7;
    int64_t len = 0;
    if (!mem.read(str + layout.unicode_length, &len, sizeof(len)) || len < 0)
        return 0xff;
    size_t bytes = std::min<uint64_t>(static_cast<uint64_t>(len) * kind, std::min<size_t>(size - 1, 255));
    memset(buf, 0, size);
    if (bytes && !mem.read(str + layout.unicode_compact_data, buf, bytes))
        return 0xff;
    return kind;
}

std::optional<std::vector<std::string>> read_local_names(const Memory& mem, uint64_t code,
                                                         const lotus_py_layout& layout)
{
    if (layout.code_localsplusnames < 0)
        return std::nullopt;
    auto tuple = mem.ptr(code + layout.code_localsplusnames);
    if (!tuple)
        return std::nullopt;
    int64_t n = 0;
    if (!mem.read(*tuple + layout.tuple_size, &n, sizeof(n)) || n < 0 || n > 4096)
        return std::nullopt;
    std::vector<uint64_t> items(static_cast<size_t>(n));
    if (n && !mem.read(*tuple + layout.tuple_items, items.data(), items.size() * sizeof(uint64_t)))
        return std::nullopt;
    std::vector<std::string> names;
    for (auto item : items) {
        auto s = read_ascii(mem, item, layout);
        names.push_back(s.value_or(""));
    }
    return names;
}

} // namespace lotus::cpython
