#include "tracepoint_ids.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/read_file.h"
#include "common/unique_fd.h"
#include "common/knobs.h"

namespace lotus::capture {

namespace {

constexpr const char* kTracefs = "/sys/kernel/tracing";

std::optional<std::vector<uint32_t>> read_ids(const std::string& root, const std::vector<std::string>& events)
{
    std::string text;
    for (const auto& ev : events) {
        auto id = common::read_file(root + "/events/" + ev + "/id");
        if (!id)
            return std::nullopt;
        text += *id;
    }
    return parse_ids(text, events.size());
}

// A child that mounts tracefs in a mount namespace of its own and writes the ids' files to a pipe. It does only
// system calls between fork and exit (the tracer may have other threads), with paths made before the fork.
std::optional<std::vector<uint32_t>> read_ids_privately(const std::vector<std::string>& events)
{
    std::vector<std::string> paths;
    for (const auto& ev : events)
        paths.push_back(std::string(kTracefs) + "/events/" + ev + "/id");
    int ends[2];
    if (pipe2(ends, O_CLOEXEC))
        return std::nullopt;
    common::UniqueFd rd(ends[0]), wr(ends[1]);
    pid_t child = fork();
    if (child < 0)
        return std::nullopt;
    if (child == 0) {
        // private first, so the mount below propagates nowhere
        if (unshare(CLONE_NEWNS) || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
            mount("nodev", kTracefs, "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr))
            _exit(1);
        char buf[64];
        for (const auto& path : paths) {
            int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
            ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
            if (n <= 0 || write(wr.get(), buf, static_cast<size_t>(n)) != n)
                _exit(1);
            close(fd);
        }
        _exit(0);
    }
    wr.reset();
    std::string text;
    char buf[256];
    for (ssize_t n; (n = read(rd.get(), buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        text.append(buf, static_cast<size_t>(n));
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return std::nullopt;
    return parse_ids(text, events.size());
}

} // namespace

std::optional<std::vector<uint32_t>> parse_ids(const std::string& text, size_t count)
{
    std::vector<uint32_t> ids;
    size_t at = 0;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos || end == at || end - at > 10)
            return std::nullopt;
        uint64_t v = 0;
        for (size_t i = at; i < end; i++) {
            if (text[i] < '0' || text[i] > '9')
                return std::nullopt;
            v = v * 10 + static_cast<uint64_t>(text[i] - '0');
        }
        if (v > UINT32_MAX)
            return std::nullopt;
        ids.push_back(static_cast<uint32_t>(v));
        at = end + 1;
    }
    if (ids.size() != count)
        return std::nullopt;
    return ids;
}

std::optional<std::vector<uint32_t>> tracepoint_ids(const std::vector<std::string>& events)
{
    for (const char* root : {kTracefs, "/sys/kernel/debug/tracing"})
        if (auto ids = read_ids(root, events))
            return ids;
    if (common::knob_on("LOTUS_NO_PRIVATE_TRACEFS"))
        return std::nullopt;
    return read_ids_privately(events);
}

} // namespace lotus::capture
