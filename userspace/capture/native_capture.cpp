#include "native_capture.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <fmt/format.h>
#include <string_view>

#include "common/clock.h"
#include "lotus_abi.h"
#include "model/user_records.h"
#include "target/proc_maps.h"

namespace lotus::capture {

namespace {

double now_s()
{
    return static_cast<double>(common::monotonic_ns()) / 1e9;
}

template <size_t N>
void copy_str(char (&dst)[N], const std::string& src)
{
    size_t n = std::min(src.size(), N - 1);
    memcpy(dst, src.data(), n);
    dst[n] = 0;
}

} // namespace

NativeCapture::NativeCapture(Probe& probe, std::vector<target::NativeSpec> specs, Emit emit)
    : probe_(probe), specs_(std::move(specs)), emit_(std::move(emit)), matched_(specs_.size(), 0)
{
}

void NativeCapture::attach_library(const std::string& path)
{
    // Once per file, however it was named (maps show the real path, dlopen often opens a symlink; a process
    // under another root is reached through /proc/PID/root).
    struct stat st;
    if (specs_.empty() || stat(path.c_str(), &st) != 0 || !libraries_.insert({st.st_dev, st.st_ino}).second ||
        !target::library_wanted(specs_, path))
        return;
    double t = now_s();
    std::vector<target::NativeFunction> fns;
    try {
        fns = target::resolve_native(specs_, path);
    } catch (const std::exception&) {
        return; // not an ELF file after all: nothing to probe
    }
    std::vector<uint64_t> offsets;
    std::vector<uint32_t> ids;
    for (const auto& f : fns) {
        offsets.push_back(f.offset);
        ids.push_back(functions_ + refused_ + static_cast<uint32_t>(ids.size()));
    }
    auto ok = probe_.attach_native(path, offsets, ids);
    for (size_t i = 0; i < fns.size(); i++) {
        if (fns[i].spec < matched_.size())
            matched_[fns[i].spec]++;
        if (!ok[i]) {
            refused_++;
            continue;
        }
        functions_++;
        model::RecordNativeFunc rec{};
        rec.type = model::kRecordNativeFunc;
        rec.func = ids[i];
        copy_str(rec.name, fns[i].name);
        copy_str(rec.library, fns[i].library);
        emit_(&rec, sizeof(rec));
    }
    attach_s_ += now_s() - t;
}

void NativeCapture::scan_process(uint32_t pid)
{
    // Each file once (a scan follows every dlopen): what attach_library does with it holds for every process.
    auto examined = [this](const target::Mapping& m) {
        return examined_.count(std::make_tuple(m.dev_major, m.dev_minor, m.inode)) != 0;
    };
    std::vector<target::Mapping> maps;
    try {
        // Asked of the kernel mapping by mapping, paths only for new files: the whole maps text of a process that
        // loaded torch is ~1,700 lines, read again at each of its ~100 dlopens while it imports.
        auto queried = target::exec_file_maps(static_cast<int>(pid), examined);
        maps = queried ? std::move(*queried) : target::read_maps(static_cast<int>(pid));
    } catch (const std::exception&) {
        return;
    }
    for (const auto& m : maps) {
        if (m.path.empty() || m.path[0] != '/' || m.perms.find('x') == std::string::npos || examined(m))
            continue;
        auto file = std::make_tuple(m.dev_major, m.dev_minor, m.inode);
        std::string local = target::openable_path(static_cast<int>(pid), m.path, m.inode, m.dev_major, m.dev_minor);
        if (local.empty())
            continue;
        examined_.insert(file);
        attach_library(local);
    }
}

void NativeCapture::on_library_open(const void* data, size_t len)
{
    auto* h = static_cast<const lotus_event_header*>(data);
    if (len >= sizeof(*h) && h->type == LOTUS_EV_LOADED) { // a dlopen returned: what it mapped
        symbolizer_.library_opened(h->tgid);
        scan_process(h->tgid);
        return;
    }
    if (len < sizeof(lotus_open) || specs_.empty() || h->type != LOTUS_EV_OPEN)
        return;
    // A library about to be loaded (dlopen opens it first): probe it by file, before it is mapped.
    auto* o = static_cast<const lotus_open*>(data);
    std::string path(o->path, strnlen(o->path, sizeof(o->path)));
    // The path as the opener sees it: under its root (a chroot, a container's mount namespace).
    std::string local = fmt::format("/proc/{}/root{}", o->h.tgid, path);
    struct stat st;
    if (!path.empty() && path[0] == '/' && path.find(".so") != std::string::npos &&
        target::library_wanted(specs_, path) && stat(local.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        attach_library(local);
}

void NativeCapture::on_event(const void* data, size_t len)
{
    auto* h = static_cast<const lotus_event_header*>(data);
    if (len < sizeof(*h))
        return;
    if (h->type == LOTUS_EV_FORK && len >= sizeof(lotus_proc_event)) {
        symbolizer_.set_parent(h->tgid, static_cast<const lotus_proc_event*>(data)->parent_tgid);
    } else if (h->type == LOTUS_EV_EXEC) {
        symbolizer_.execed(h->tgid);
        written_.erase(h->tgid);
    } else if (h->type == LOTUS_EV_EXIT) {
        written_.erase(h->tgid);
    } else if (h->type == LOTUS_EV_OPEN && len >= sizeof(lotus_open)) {
        auto* o = static_cast<const lotus_open*>(data);
        if (std::string_view(o->path, strnlen(o->path, sizeof(o->path))).find(".so") != std::string_view::npos)
            symbolizer_.library_opened(h->tgid);
        on_library_open(data, len);
    } else if (h->type == LOTUS_EV_SAMPLE && len >= sizeof(lotus_sample)) {
        auto* s = static_cast<const lotus_sample*>(data);
        // Callers are only looked at when the leaf has no name (the engine's rule); without frame pointers
        // they are mostly noise, and each new one would cost a lookup and a record.
        auto& written = written_[h->tgid];
        for (uint32_t i = 0; i < s->nr_ips && i < LOTUS_STACK_DEPTH; i++) {
            if (i == 1 && written[s->ip[0]])
                break;
            auto [it, fresh] = written.try_emplace(s->ip[i], false);
            if (!fresh)
                continue;
            auto f = symbolizer_.resolve(h->tgid, s->ip[i]);
            it->second = !f.function.empty();
            model::RecordSymbol rec{};
            rec.type = model::kRecordSymbol;
            rec.tgid = h->tgid;
            rec.ts_ns = h->ts_ns;
            rec.ip = s->ip[i];
            copy_str(rec.name, f.function);
            copy_str(rec.library, f.library);
            emit_(&rec, sizeof(rec));
        }
    }
}

} // namespace lotus::capture
