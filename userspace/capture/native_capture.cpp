#include "native_capture.h"

#include <limits.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <string_view>

#include "common/clock.h"
#include "lotus_abi.h"
#include "model/user_records.h"
#include "proc/proc_maps.h"

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

NativeCapture::NativeCapture(Probe& probe, std::vector<elf::NativeSpec> specs, const proc::ProcessTree& tree, Emit emit)
    : probe_(probe), specs_(std::move(specs)), emit_(std::move(emit)), symbolizer_(tree), matched_(specs_.size(), 0)
{
}

const NativeCapture::Probed* NativeCapture::attach_library(common::UniqueFd fd, const std::string& name)
{
    // Once per file, however it was named (maps show the real path, dlopen often opens a symlink; a process
    // under another root is reached through /proc/PID/root). Read and probed through this one descriptor, held
    // for the session (its /proc/self/fd name is never another file's): the file probed is the file read.
    struct stat st;
    if (specs_.empty() || !fd || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        return nullptr;
    if (!libraries_.insert({st.st_dev, st.st_ino}).second) {
        auto p = probed_.find({st.st_dev, st.st_ino});
        return p != probed_.end() ? &p->second : nullptr;
    }
    if (!elf::library_wanted(specs_, name))
        return nullptr;
    std::string path = "/proc/self/fd/" + std::to_string(fd.get());
    held_.push_back(std::move(fd));
    double t = now_s();
    std::vector<elf::NativeFunction> fns;
    try {
        fns = elf::resolve_native(specs_, path, name);
    } catch (const std::exception&) {
        return nullptr; // not an ELF file after all (or cut short under us): nothing to probe
    }
    // A function whose own return instructions were not found (its bytes do not decode whole, or it only leaves
    // by tail calls) is not probed: its calls would never end a span. Said, by name, at the end of the run.
    std::vector<NativePoints> points;
    std::vector<size_t> probed;
    for (size_t i = 0; i < fns.size(); i++) {
        if (fns[i].spec < matched_.size())
            matched_[fns[i].spec]++;
        if (fns[i].returns.empty()) {
            without_returns_.push_back(fns[i].library + ":" + fns[i].name);
            continue;
        }
        points.push_back({fns[i].offset, fns[i].returns, next_id_++});
        probed.push_back(i);
    }
    auto ok = probe_.attach_native(path, points);
    bool live = false;
    for (size_t j = 0; j < points.size(); j++) {
        if (!ok[j]) {
            refused_++;
            continue;
        }
        const auto& fn = fns[probed[j]];
        functions_++;
        live = true;
        model::RecordNativeFunc rec{};
        rec.type = model::kRecordNativeFunc;
        rec.func = points[j].id;
        copy_str(rec.name, fn.name);
        copy_str(rec.library, fn.library);
        emit_(&rec, sizeof(rec));
    }
    attach_s_ += now_s() - t;
    if (!live)
        return nullptr;
    return &(probed_[{st.st_dev, st.st_ino}] = Probed{common::monotonic_ns(), fns.front().library});
}

void NativeCapture::probed_late(uint32_t pid, uint64_t loaded_ns, const Probed& p)
{
    if (!loaded_ns || p.live_ns <= loaded_ns || !said_late_.insert({pid, p.library}).second)
        return;
    model::RecordNativeLate late{};
    late.type = model::kRecordNativeLate;
    late.tgid = pid;
    late.ts_ns = p.live_ns;
    late.loaded_ns = loaded_ns;
    copy_str(late.library, p.library);
    emit_(&late, sizeof(late));
}

void NativeCapture::scan_process(uint32_t pid, uint64_t loaded_ns)
{
    // Each file once (a scan follows every dlopen): what attach_library does with it holds for every process.
    auto examined = [this](const proc::Mapping& m) {
        return examined_.count(std::make_tuple(m.dev_major, m.dev_minor, m.inode)) != 0;
    };
    std::vector<proc::Mapping> maps;
    try {
        // Asked of the kernel mapping by mapping, paths only for new files: the whole maps text of a process that
        // loaded torch is long, and would be read again at each of its dlopens while it imports (how long and
        // how many: docs/performance.md, "What costs what").
        auto queried = proc::exec_file_maps(static_cast<int>(pid), examined);
        maps = queried ? std::move(*queried) : proc::read_maps(static_cast<int>(pid));
    } catch (const std::exception&) {
        return;
    }
    for (const auto& m : maps) {
        if (m.perms.find('x') == std::string::npos)
            continue;
        // A file probed since this process's dlopen returned (by this scan, or another process's meanwhile: the
        // probes are on the file): this process may have called it before.
        if (examined(m)) {
            if (auto p = probed_.find({makedev(m.dev_major, m.dev_minor), m.inode}); p != probed_.end())
                probed_late(pid, loaded_ns, p->second);
            continue;
        }
        if (m.path.empty() || m.path[0] != '/')
            continue;
        common::UniqueFd fd = proc::open_mapped(static_cast<int>(pid), m);
        if (!fd)
            continue;
        examined_.insert(std::make_tuple(m.dev_major, m.dev_minor, m.inode));
        // (a file unlinked or replaced since it was mapped: the kernel adds " (deleted)" to its name)
        std::string_view name = m.path;
        if (name.ends_with(" (deleted)"))
            name.remove_suffix(sizeof(" (deleted)") - 1);
        if (auto* p = attach_library(std::move(fd), std::string(name)))
            probed_late(pid, loaded_ns, *p);
    }
}

void NativeCapture::on_library_open(const void* data, size_t len)
{
    auto* h = static_cast<const lotus_event_header*>(data);
    if (len >= sizeof(*h) && h->type == LOTUS_EV_LOADED) { // a dlopen returned: what it mapped
        symbolizer_.library_opened(h->tgid);
        scan_process(h->tgid, h->ts_ns);
        return;
    }
    if (len < sizeof(lotus_open) || specs_.empty() || h->type != LOTUS_EV_OPEN)
        return;
    // A library about to be loaded (dlopen opens it first): probe it by file, before it is mapped.
    auto* o = static_cast<const lotus_open*>(data);
    std::string path(o->path, strnlen(o->path, sizeof(o->path)));
    // The path as the opener sees it: under its root (a chroot, a container's mount namespace). Opened once
    // (O_NONBLOCK: a FIFO put there would block the open), a regular file only (attach_library).
    std::string local = fmt::format("/proc/{}/root{}", o->h.tgid, path);
    if (!path.empty() && path[0] == '/' && path.find(".so") != std::string::npos &&
        elf::library_wanted(specs_, path)) {
        common::UniqueFd fd(::open(local.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
        char real[PATH_MAX];
        std::string name = fd && realpath(local.c_str(), real) ? std::string(real) : path;
        if (auto* p = attach_library(std::move(fd), name)) // by file: usually before the loader has mapped it
            probed_late(o->h.tgid, o->h.ts_ns, *p);
    }
}

void NativeCapture::on_event(const void* data, size_t len) { model::dispatch(data, len, *this); }

bool NativeCapture::named(uint32_t pid, uint64_t ip)
{
    // The ranges already written for this process, as its current maps resolve them, answer most addresses (a
    // stack's callers are the same few call sites over and over); else the symbolizer.
    uint64_t g = symbolizer_.maps_generation(pid);
    for (auto* ranges : {&written_, &looked_up_}) {
        auto w = ranges->find(pid);
        if (w == ranges->end() || w->second.generation != g)
            continue;
        auto next = w->second.ranges.upper_bound(ip);
        if (next != w->second.ranges.begin() && ip < std::prev(next)->second.hi)
            return std::prev(next)->second.named;
    }
    auto f = symbolizer_.resolve(pid, ip);
    bool is_named = !f.function.empty();
    auto& mine = looked_up_[pid];
    if (mine.generation != symbolizer_.maps_generation(pid)) // (resolving may have read the maps again)
        mine = WrittenRanges{symbolizer_.maps_generation(pid), {}};
    if (f.lo <= ip && ip < f.hi) {
        auto next = mine.ranges.upper_bound(ip);
        uint64_t lo = next != mine.ranges.begin() ? std::max(f.lo, std::prev(next)->second.hi) : f.lo;
        uint64_t hi = next != mine.ranges.end() ? std::min(f.hi, next->first) : f.hi;
        if (lo <= ip && ip < hi)
            mine.ranges.emplace_hint(next, lo, Written{hi, is_named});
    }
    return is_named;
}

lotus_sample NativeCapture::unwound(const lotus_sample_stack& st, uint32_t frames)
{
    lotus_sample out = st.s;
    out.h.type = LOTUS_EV_SAMPLE;
    frames = std::min<uint32_t>(frames, LOTUS_STACK_DEPTH);
    uint32_t pid = st.s.h.tgid;
    // A named leaf is the sample's function (the engine's first rule): its callers would not be looked at.
    if (!out.nr_ips || named(pid, out.ip[0]))
        return out;
    unwound_++;
    elf::StackCopy copy{out.ip[0], st.sp, st.bp, st.stack, std::min<size_t>(st.stack_len, sizeof(st.stack))};
    // Hidden functions (templates' bodies, kernels' lambdas) lie between the leaf and the caller that names it:
    // up to 32 frames are walked for the named ones kept.
    if (out.nr_ips >= frames)
        return out;
    unwinder_.walk(copy, 32, [&](uint64_t ip) { return symbolizer_.place(pid, ip); }, [&](uint64_t ra) {
        callers_++;
        // The call instruction is what ran in that function (a return address may be the next function's first).
        if (named(pid, ra - 1))
            out.ip[out.nr_ips++] = ra - 1;
        return out.nr_ips < frames;
    });
    return out;
}

void NativeCapture::process_event(const lotus_proc_event& p)
{
    if (p.h.type == LOTUS_EV_FORK) {
        symbolizer_.forked(p.h.tgid, p.parent_tgid);
        return;
    }
    if (p.h.type == LOTUS_EV_EXEC)
        symbolizer_.execed(p.h.tgid);
    written_.erase(p.h.tgid);
    looked_up_.erase(p.h.tgid);
    std::erase_if(said_late_, [&](const auto& s) { return s.first == p.h.tgid; });
}

void NativeCapture::open(const lotus_open& o)
{
    if (std::string_view(o.path, strnlen(o.path, sizeof(o.path))).find(".so") != std::string_view::npos)
        symbolizer_.library_opened(o.h.tgid);
    on_library_open(&o, sizeof(o));
}

void NativeCapture::sample(const lotus_sample& s)
{
    // Callers are only looked at when the leaf has no name (the engine's rule); without frame pointers
    // they are mostly noise, and each new one would cost a lookup and a record.
    // One record per function (or gap between them) a process's samples meet, not per address: every
    // address of its range resolves the same.
    auto& process = written_[s.h.tgid];
    auto& written = process.ranges;
    auto through_current_maps = [&] {
        uint64_t g = symbolizer_.maps_generation(s.h.tgid);
        if (g != process.generation) {
            written.clear();
            process.generation = g;
        }
    };
    through_current_maps();
    bool leaf_named = false;
    for (uint32_t i = 0; i < s.nr_ips && i < LOTUS_STACK_DEPTH; i++) {
        if (i == 1 && leaf_named)
            break;
        uint64_t ip = s.ip[i];
        auto next = written.upper_bound(ip); // the first range starting after ip
        if (next != written.begin() && ip < std::prev(next)->second.hi) {
            leaf_named = i == 0 ? std::prev(next)->second.named : leaf_named;
            continue;
        }
        auto f = symbolizer_.resolve(s.h.tgid, ip);
        if (!(f.lo <= ip && ip < f.hi))
            f.lo = ip, f.hi = ip + 1;
        if (symbolizer_.maps_generation(s.h.tgid) != process.generation) { // resolving read them again
            through_current_maps();
            next = written.end();
        }
        // Within what is not written yet (a range written from other maps may lie across it).
        if (next != written.end())
            f.hi = std::min(f.hi, next->first);
        if (next != written.begin())
            f.lo = std::max(f.lo, std::prev(next)->second.hi);
        bool named = !f.function.empty();
        written.emplace_hint(next, f.lo, Written{f.hi, named});
        leaf_named = i == 0 ? named : leaf_named;
        model::RecordSymbolRange rec{};
        rec.type = model::kRecordSymbolRange;
        rec.tgid = s.h.tgid;
        rec.ts_ns = s.h.ts_ns;
        rec.ip_lo = f.lo;
        rec.ip_hi = f.hi;
        copy_str(rec.name, f.function);
        copy_str(rec.library, f.library);
        emit_(&rec, sizeof(rec));
    }
}

} // namespace lotus::capture
