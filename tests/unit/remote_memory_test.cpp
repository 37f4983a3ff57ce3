// ProcessMemory against a real process: what it reads, and that reading costs the process nothing.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "cpython/remote_memory.h"

using lotus::cpython::ProcessMemory;

namespace {

// A smaps_rollup field of pid, in kB (-1: not found).
long rollup_kb(pid_t pid, const std::string& key)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind(key + ":", 0) == 0)
            return std::stol(line.substr(key.size() + 1));
    return -1;
}

} // namespace

// A fork child's anonymous pages are its parent's until either writes them: reading them from outside must not
// copy them (process_vm_readv's pins did, Linux 5.19+), or the tracer would cost a worker memory and its PSS.
TEST(RemoteMemory, AWorkersPagesStaySharedWithItsParentWhenRead)
{
    constexpr size_t kBytes = 8 << 20, kPage = 4096;
    auto* buf = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf, MAP_FAILED);
    for (size_t i = 0; i < kBytes; i += kPage)
        buf[i] = static_cast<char>(i / kPage);
    int go[2], ready[2];
    ASSERT_EQ(pipe(go), 0);
    ASSERT_EQ(pipe(ready), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        char c = 0;
        (void)!write(ready[1], &c, 1);
        (void)!read(go[0], &c, 1);
        _exit(0);
    }
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    long before = rollup_kb(child, "Private_Clean") + rollup_kb(child, "Private_Dirty");
    {
        ProcessMemory mem(child);
        for (size_t i = 0; i < kBytes; i += kPage) {
            char v = 0;
            ASSERT_TRUE(mem.read(reinterpret_cast<uint64_t>(buf + i), &v, 1));
            ASSERT_EQ(v, static_cast<char>(i / kPage));
        }
        uint64_t word = 0;
        EXPECT_FALSE(mem.read(0x1000, &word, sizeof(word))) << "nothing mapped there";
        EXPECT_FALSE(mem.read(~0ull - 4, &word, sizeof(word)));
    }
    long after = rollup_kb(child, "Private_Clean") + rollup_kb(child, "Private_Dirty");
    EXPECT_GE(before, 0);
    EXPECT_LT(after - before, 1024) << "kB the child got of its own from being read (of " << kBytes / 1024 << ")";
    (void)!write(go[1], &c, 1);
    waitpid(child, nullptr, 0);
    EXPECT_FALSE(ProcessMemory(child).read(reinterpret_cast<uint64_t>(buf), &c, 1)) << "the process is gone";
    munmap(buf, kBytes);
    for (int fd : {go[0], go[1], ready[0], ready[1]})
        close(fd);
}
