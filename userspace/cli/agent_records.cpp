// The agent's record files: a name reserved for each job's record in --record-dir, and their budget
// (--record-max-mb: RecordBudget).
#include "agent.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

namespace lotus::cli {

std::string reserve_record(const std::string& dir, const std::string& name)
{
    // O_EXCL: a file already there (a job of equal labels, an older run) is never replaced, the name takes a
    // suffix instead; O_NOFOLLOW: a link at the name is not followed. 0600: a record holds the job's command
    // lines and file paths. The session's record then replaces this empty file when it completes.
    for (int n = 1; n <= 1000; n++) {
        std::string path = n == 1 ? fmt::format("{}/{}.lbt", dir, name) : fmt::format("{}/{}-{}.lbt", dir, name, n);
        int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            close(fd);
            return path;
        }
        if (errno != EEXIST)
            return "";
    }
    errno = EEXIST;
    return "";
}

namespace {

// A name the agent gives its records (reserve_record): file_name_part's bytes, ".lbt" at the end.
bool record_name(const std::string& name)
{
    if (name.size() < 5 || name[0] == '.' || name.compare(name.size() - 4, 4, ".lbt") != 0)
        return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
               c == '.';
    });
}

} // namespace

RecordBudget::RecordBudget(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_(max_bytes)
{
    std::string path = dir_ + "/" + kNotes;
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT)
        throw std::runtime_error(fmt::format("{}: {}", path, strerror(errno)));
    if (fd >= 0) {
        struct stat st{};
        bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022);
        std::string text;
        char buf[65536];
        for (ssize_t n; ours && (n = read(fd, buf, sizeof(buf))) > 0;)
            text.append(buf, static_cast<size_t>(n));
        close(fd);
        if (!ours) // (another's file at the notes' name: its notes are not taken, and it is replaced at the save)
            text.clear();
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);) {
            std::istringstream fields(line);
            Note n;
            if (!(fields >> n.ino >> n.size >> n.mtime_ns >> n.name) || !record_name(n.name))
                continue;
            auto now = look(n.name);
            if (now && now->ino == n.ino && now->size == n.size && now->mtime_ns == n.mtime_ns)
                notes_.push_back(std::move(n));
        }
    }
    if (auto error = save(); !error.empty())
        throw std::runtime_error(error);
}

std::optional<RecordBudget::Note> RecordBudget::look(const std::string& name) const
{
    struct stat st{};
    if (lstat((dir_ + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        return std::nullopt;
    return Note{name, static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::string RecordBudget::save() const
{
    std::string text;
    for (const auto& n : notes_)
        text += fmt::format("{} {} {} {}\n", n.ino, n.size, n.mtime_ns, n.name);
    std::string tmp = dir_ + "/" + kNotes + ".XXXXXX";
    int fd = mkostemp(tmp.data(), O_CLOEXEC); // (0600, O_EXCL)
    if (fd < 0)
        return fmt::format("cannot keep the notes of the agent's records in {}: {}", dir_, strerror(errno));
    bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp.c_str(), (dir_ + "/" + kNotes).c_str()) != 0) {
        std::string error = fmt::format("cannot keep the notes of the agent's records in {}: {}", dir_, strerror(errno));
        unlink(tmp.c_str());
        return error;
    }
    return "";
}

void RecordBudget::add(const std::string& name)
{
    if (!record_name(name))
        return;
    if (auto n = look(name)) {
        notes_.erase(std::remove_if(notes_.begin(), notes_.end(), [&](const Note& o) { return o.name == name; }),
                     notes_.end());
        notes_.push_back(std::move(*n));
        dirty_ = true;
    }
}

uint64_t RecordBudget::bytes() const
{
    uint64_t total = 0;
    for (const auto& n : notes_)
        total += n.size;
    return total;
}

std::vector<RecordBudget::Removed> RecordBudget::enforce(std::string* error)
{
    std::vector<Removed> out;
    bool changed = dirty_;
    dirty_ = false;
    if (!changed && bytes() <= max_)
        return out; // (within: nothing to look at)
    // The notes of files no longer the one noted are dropped first, so that they count nothing.
    for (auto it = notes_.begin(); it != notes_.end();) {
        auto now = look(it->name);
        if (now && now->ino == it->ino && now->size == it->size && now->mtime_ns == it->mtime_ns) {
            ++it;
            continue;
        }
        it = notes_.erase(it);
        changed = true;
    }
    while (bytes() > max_ && !notes_.empty()) {
        Note n = notes_.front();
        notes_.pop_front();
        changed = true;
        auto now = look(n.name); // (still the file noted: checked again just before)
        if (now && now->ino == n.ino && now->size == n.size && now->mtime_ns == n.mtime_ns &&
            unlink((dir_ + "/" + n.name).c_str()) == 0)
            out.push_back({n.name, n.size});
    }
    if (changed) {
        std::string e = save();
        if (error)
            *error = e;
    }
    return out;
}

} // namespace lotus::cli
