#include "cpython/instance_attrs.h"

#include <cstring>

namespace lotus::cpython {

namespace {

constexpr int64_t kMaxEntries = 1 << 16; // (an instance's attributes: far fewer)
constexpr int kMaxBases = 32;

template <typename T>
std::optional<T> read_as(const Memory& mem, uint64_t addr)
{
    T v{};
    if (!addr || !mem.read(addr, &v, sizeof(v)))
        return std::nullopt;
    return v;
}

} // namespace

std::optional<uint64_t> ObjectReader::attr(uint64_t obj, std::string_view name) const
{
    auto type = mem_.ptr(obj + layout_.object_type);
    auto flags = type ? read_as<uint64_t>(mem_, *type + layout_.type_flags) : std::nullopt;
    if (!flags)
        return std::nullopt;
    auto cached_keys = [&] { return mem_.ptr(*type + objects_.heaptype_cached_keys).value_or(0); };
    if (objects_.flag_managed_dict && (*flags & static_cast<uint64_t>(objects_.flag_managed_dict))) {
        uint64_t raw = mem_.ptr(obj + objects_.managed_dict).value_or(0);
        if (objects_.managed_tagged && (raw & 1)) // 3.12: the values, tagged
            return in_keys(cached_keys(), raw + 1 + objects_.values_items, name);
        if (raw)
            return in_dict(raw, name);
        if (objects_.managed_values) { // 3.11
            uint64_t values = mem_.ptr(obj + objects_.managed_values).value_or(0);
            return values ? in_keys(cached_keys(), values + objects_.values_items, name) : std::nullopt;
        }
        if (objects_.flag_inline_values && (*flags & static_cast<uint64_t>(objects_.flag_inline_values))) {
            auto basicsize = read_as<int64_t>(mem_, *type + objects_.type_basicsize);
            if (!basicsize || *basicsize <= 0)
                return std::nullopt;
            uint64_t values = obj + static_cast<uint64_t>(*basicsize);
            auto valid = read_as<uint8_t>(mem_, values + objects_.values_valid);
            return valid && *valid ? in_keys(cached_keys(), values + objects_.values_items, name) : std::nullopt;
        }
        return std::nullopt;
    }
    auto offset = read_as<int64_t>(mem_, *type + objects_.type_dictoffset);
    if (!offset || *offset <= 0) // (negative: counted from a variable-size object's end; none of ours)
        return std::nullopt;
    uint64_t dict = mem_.ptr(obj + static_cast<uint64_t>(*offset)).value_or(0);
    return dict ? in_dict(dict, name) : std::nullopt;
}

std::optional<uint64_t> ObjectReader::in_dict(uint64_t dict, std::string_view name) const
{
    uint64_t keys = mem_.ptr(dict + objects_.dict_keys).value_or(0);
    uint64_t values = mem_.ptr(dict + objects_.dict_values).value_or(0); // non-zero: a split table
    return in_keys(keys, values ? values + objects_.values_items : 0, name);
}

// The entries of a dict's keys, in order, compared by text (no hashing: the keys are few); a split table's
// values are in `values`, by the entry's index.
std::optional<uint64_t> ObjectReader::in_keys(uint64_t keys, uint64_t values, std::string_view name) const
{
    auto n = read_as<int64_t>(mem_, keys + objects_.keys_nentries);
    if (!keys || !n || *n < 0 || *n > kMaxEntries)
        return std::nullopt;
    uint64_t entries;
    int32_t size = objects_.entry_size, key = objects_.entry_key, value = objects_.entry_value;
    if (objects_.keys_size >= 0) { // 3.10: indices of 1, 2, 4 or 8 bytes as the table's size needs
        auto slots = read_as<int64_t>(mem_, keys + objects_.keys_size);
        if (!slots || *slots <= 0 || *slots > 4 * kMaxEntries)
            return std::nullopt;
        int width = *slots <= 0xff ? 1 : *slots <= 0xffff ? 2 : 4;
        entries = keys + objects_.keys_indices + static_cast<uint64_t>(*slots) * width;
    } else {
        auto log2_bytes = read_as<uint8_t>(mem_, keys + objects_.keys_log2_index_bytes);
        auto kind = read_as<uint8_t>(mem_, keys + objects_.keys_kind);
        if (!log2_bytes || !kind || *log2_bytes > 24)
            return std::nullopt;
        entries = keys + objects_.keys_indices + (uint64_t{1} << *log2_bytes);
        if (*kind != 0) { // DICT_KEYS_UNICODE, DICT_KEYS_SPLIT: no hash kept
            size = objects_.unicode_entry_size, key = objects_.unicode_entry_key, value = objects_.unicode_entry_value;
        }
    }
    std::vector<char> table(static_cast<size_t>(*n) * size);
    if (table.empty() || !mem_.read(entries, table.data(), table.size()))
        return std::nullopt;
    for (int64_t i = 0; i < *n; i++) {
        uint64_t k = 0, v = 0;
        memcpy(&k, table.data() + i * size + key, sizeof(k));
        if (!k) // (deleted)
            continue;
        auto text = ascii(k);
        if (!text || *text != name)
            continue;
        if (values)
            v = mem_.ptr(values + static_cast<uint64_t>(i) * sizeof(uint64_t)).value_or(0);
        else
            memcpy(&v, table.data() + i * size + value, sizeof(v));
        return v ? std::optional<uint64_t>(v) : std::nullopt; // (NULL: deleted from a split table)
    }
    return std::nullopt;
}

std::vector<std::string> ObjectReader::classes(uint64_t obj) const
{
    std::vector<std::string> out;
    uint64_t type = mem_.ptr(obj + layout_.object_type).value_or(0);
    for (int i = 0; type && i < kMaxBases; i++) {
        char name[128];
        uint64_t tp_name = mem_.ptr(type + layout_.type_name).value_or(0);
        if (!tp_name || !read_cstr(mem_, tp_name, name, sizeof(name)))
            break;
        out.emplace_back(name);
        type = mem_.ptr(type + layout_.type_base).value_or(0);
    }
    return out;
}

std::optional<std::string> ObjectReader::ascii(uint64_t str) const
{
    auto type = mem_.ptr(str + layout_.object_type);
    auto flags = type ? read_as<uint64_t>(mem_, *type + layout_.type_flags) : std::nullopt;
    constexpr uint64_t kUnicodeSubclass = 1ul << 28; // Py_TPFLAGS_UNICODE_SUBCLASS (the same in every version)
    if (!flags || !(*flags & kUnicodeSubclass))
        return std::nullopt;
    return read_ascii(mem_, str, layout_);
}

} // namespace lotus::cpython
