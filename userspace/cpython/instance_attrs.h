// A few things of a target's objects that user space reads (never writes): an instance attribute's value as
// the instance's own __dict__ holds it (its managed dict or values, or its dict at tp_dictoffset; descriptors
// and class attributes are not looked at), its class and the classes above it. Interpretation only: the bytes
// come from a Memory (remote_memory.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cpython/cpython_layouts.h"
#include "cpython/remote_memory.h"
#include "lotus_abi.h"

namespace lotus::cpython {

class ObjectReader {
public:
    ObjectReader(const Memory& mem, const lotus_py_layout& layout, const ObjectLayout& objects)
        : mem_(mem), layout_(layout), objects_(objects)
    {
    }
    // The address of the object obj.name refers to, or nullopt (not an attribute of the instance, unreadable).
    std::optional<uint64_t> attr(uint64_t obj, std::string_view name) const;
    // tp_name of obj's class, then of each class it derives from (tp_base), the most derived first.
    std::vector<std::string> classes(uint64_t obj) const;
    // An ASCII str object's text, or nullopt (not ASCII, not a str, unreadable).
    std::optional<std::string> ascii(uint64_t str) const;

private:
    std::optional<uint64_t> in_dict(uint64_t dict, std::string_view name) const;
    std::optional<uint64_t> in_keys(uint64_t keys, uint64_t values, std::string_view name) const;
    const Memory& mem_;
    const lotus_py_layout& layout_;
    const ObjectLayout& objects_;
};

} // namespace lotus::cpython
