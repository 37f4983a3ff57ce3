// What the files of Probe's implementation and its units share (probe.cpp, python_links.cpp, holds.cpp...): not
// for other units.
#pragma once
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fmt/format.h>
#include <memory>
#include <vector>

#include "capture_error.h"

namespace lotus::capture {

// A libbpf link, destroyed (detached) with its owner.
struct LinkFree {
    void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using Link = std::unique_ptr<bpf_link, LinkFree>;

// A tracepoint program attached by its section name, into its skeleton link; throws with the tracepoint named.
inline void attach_tracepoint(bpf_program* prog, bpf_link*& link, const char* what)
{
    link = bpf_program__attach(prog);
    if (!link)
        throw CaptureError(fmt::format("cannot attach the {} tracepoint: {}", what, strerror(errno)));
}

// The keys of a BPF hash map keyed by tgid, as they are now.
inline std::vector<uint32_t> tgid_keys(int map_fd)
{
    std::vector<uint32_t> keys;
    uint32_t key = 0, next = 0;
    for (uint32_t* prev = nullptr; bpf_map_get_next_key(map_fd, prev, &next) == 0; prev = &key) {
        keys.push_back(next);
        key = next;
    }
    return keys;
}

} // namespace lotus::capture
