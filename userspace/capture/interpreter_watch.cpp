#include "interpreter_watch.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "model/user_records.h"
#include "proc/proc_maps.h"

namespace lotus::capture {

namespace {

template <size_t N>
void copy_str(char (&dst)[N], const std::string& s)
{
    std::memcpy(dst, s.data(), std::min(s.size(), N - 1));
}

} // namespace

void InterpreterWatch::check(uint64_t now_ns)
{
    constexpr uint64_t kLoaderWaitNs = 10'000'000'000ull; // a loader maps its libraries within milliseconds
    for (auto it = pending_.begin(); it != pending_.end();) {
        auto other = cpython::other_interpreter(static_cast<int>(it->first), probed_);
        if (!other && now_ns - it->second < kLoaderWaitNs) {
            ++it;
            continue;
        }
        if (other && !other->empty()) {
            model::RecordOtherInterpreter r{};
            r.type = model::kRecordOtherInterpreter;
            r.tgid = r.tid = it->first;
            r.ts_ns = now_ns;
            copy_str(r.path, *other);
            emit_(&r, sizeof(r));
        }
        it = pending_.erase(it);
    }
}

void InterpreterWatch::scan_command(uint32_t command, uint32_t root, uint64_t now_ns, bool force)
{
    if (command == root || (!force && now_ns - last_scan_ns_ < 1'000'000'000ull))
        return;
    last_scan_ns_ = now_ns;
    for (int pid : proc::descendants(static_cast<int>(command))) {
        // Looked at again only once it has exec'd something else (a shell's child about to exec python).
        std::error_code ec;
        std::string exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec).string();
        auto seen = examined_.find(static_cast<uint32_t>(pid));
        if (ec || (seen != examined_.end() && seen->second == exe))
            continue;
        if (proc::descends_from(pid, [&](int p) { return p == static_cast<int>(root); })) { // traced
            examined_[static_cast<uint32_t>(pid)] = exe;
            continue;
        }
        auto path = cpython::cpython_of(pid);
        if (!path)
            continue; // its loader has yet to map its libpython: next time
        examined_[static_cast<uint32_t>(pid)] = exe;
        if (path->empty())
            continue;
        model::RecordUntracedPython r{};
        r.type = model::kRecordUntracedPython;
        r.tgid = r.tid = static_cast<uint32_t>(pid);
        r.ts_ns = now_ns;
        copy_str(r.comm, proc::read_comm(pid));
        copy_str(r.path, *path);
        emit_(&r, sizeof(r));
    }
}

} // namespace lotus::capture
