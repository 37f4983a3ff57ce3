// Stacks read from outside real interpreters of each version (pyenv's 3.10-3.13, Debian's 3.11, 3.14, 3.15, where
// present), as `lotus-bpf dump` reads them: each frame's function, file, line and int arguments, innermost first,
// and the native stack of the thread blocked in read().
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "process_dump.h"

namespace {

const char* kScript = R"(import os, sys
def inner(idx):
    r, w = os.pipe(); print(os.getpid(), flush=True)
    os.read(r, 1)
def outer(n):
    inner(n + 1)
outer(41)
)";

std::vector<std::string> interpreters()
{
    std::vector<std::string> out;
    for (std::string v : {"3.10.13", "3.11.7", "3.12.1", "3.13.0"}) {
        std::string exe = fmt::format("/root/.pyenv/versions/{}/bin/python{}", v, v.substr(0, v.rfind('.')));
        if (access(exe.c_str(), X_OK) == 0)
            out.push_back(exe);
    }
    if (access("/usr/bin/python3.11", X_OK) == 0)
        out.push_back("/usr/bin/python3.11");
    for (std::string minor : {"3.14", "3.15"})
        if (auto exe = fmt::format("/opt/lotus-bpf/python{0}/usr/bin/python{0}", minor); access(exe.c_str(), X_OK) == 0)
            out.push_back(exe);
    return out;
}

} // namespace

TEST(PythonStacks, ReadFromRealInterpretersOfEachVersion)
{
    auto pythons = interpreters();
    if (pythons.empty())
        GTEST_SKIP() << "no CPython 3.10-3.15 on this machine";
    char script[] = "/tmp/lotus-stacks-XXXXXX";
    int fd = mkstemp(script);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, kScript, strlen(kScript)), static_cast<ssize_t>(strlen(kScript)));
    close(fd);
    for (const auto& exe : pythons) {
        SCOPED_TRACE(exe);
        // it blocks in read() on line 4, from a pipe of its own that nothing writes
        FILE* pipe = popen(fmt::format("exec {} {}", exe, script).c_str(), "r");
        ASSERT_TRUE(pipe);
        int pid = 0;
        ASSERT_EQ(fscanf(pipe, "%d", &pid), 1);
        usleep(100 * 1000); // into read()
        auto d = lotus::cli::dump_process(pid, true);
        kill(pid, SIGKILL);
        pclose(pipe);
        ASSERT_EQ(d.error, "");
        const lotus::cpython::PyThreadStack* st = nullptr;
        const lotus::cli::ThreadDump* thread = nullptr;
        for (const auto& t : d.threads)
            if (t.tid == static_cast<uint32_t>(pid))
                st = &*t.python, thread = &t;
        if (!st && d.unmatched.size() == 1) // 3.10 keeps no thread id
            st = &d.unmatched[0];
        ASSERT_TRUE(st);
        ASSERT_EQ(st->frames.size(), 3u) << st->cut;
        EXPECT_EQ(st->cut, "");
        EXPECT_EQ(st->frames[0].function, "inner");
        EXPECT_EQ(st->frames[0].file, script);
        EXPECT_EQ(st->frames[0].line, 4);
        ASSERT_EQ(st->frames[0].int_args.size(), 1u);
        EXPECT_EQ(st->frames[0].int_args[0], std::make_pair(std::string("idx"), int64_t{42}));
        EXPECT_EQ(st->frames[1].function, "outer");
        EXPECT_EQ(st->frames[1].line, 6);
        EXPECT_EQ(st->frames[2].function, "<module>");
        EXPECT_EQ(st->frames[2].line, 7);
        if (thread) { // its native stack, from the read() it is blocked in
            EXPECT_EQ(thread->syscall, "read");
            ASSERT_FALSE(thread->native.empty()) << thread->native_missing;
            EXPECT_NE(thread->native[0].find("libc.so.6"), std::string::npos) << thread->native[0];
        }
    }
    unlink(script);
}
