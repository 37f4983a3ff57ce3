// The commands' library (userspace/cli) and the stream's first stages in capture, without BPF.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

#include "capture/descriptions.h"
#include "cli/reconstruction.h"
#include "proc/process_tree.h"

using namespace lotus;

TEST(Cli, CallsInlinedIsTheVersionsCapabilityUnlessAllCalls)
{
    EXPECT_FALSE(cli::calls_inlined(*cpython::caps_for({3, 10, 0}), false));
    EXPECT_TRUE(cli::calls_inlined(*cpython::caps_for({3, 11, 0}), false));
    EXPECT_TRUE(cli::calls_inlined(*cpython::caps_for({3, 14, 0}), false));
    EXPECT_FALSE(cli::calls_inlined(*cpython::caps_for({3, 12, 0}), true));
    EXPECT_TRUE(cli::calls_inlined(cpython::VersionCaps{}, false)); // a version no row knows
}

TEST(Cli, RuleListsAreTheOptionsThenTheRulesFile)
{
    auto path = std::filesystem::temp_directory_path() / fmt::format("lotus-rules-{}.json", getpid());
    std::ofstream(path) << R"({"pipelines": ["FilePipe"], "spans": ["*/aug.py:Jitter.__call__"]})";
    cli::Options opts;
    opts.pipeline_classes = {"MyPipe"};
    opts.spans = {"f"};
    opts.rules_file = path;
    auto r = cli::rule_lists(opts);
    std::filesystem::remove(path);
    EXPECT_EQ(r.pipelines, (std::vector<std::string>{"MyPipe", "FilePipe"}));
    EXPECT_EQ(r.spans, (std::vector<std::string>{"f", "*/aug.py:Jitter.__call__"}));
}

TEST(ProcessTree, LineageIsThePidThenItsKnownAncestors)
{
    proc::ProcessTree t;
    t.add(30, 20);
    t.add(20, 10);
    EXPECT_EQ(t.lineage(30), (std::vector<uint32_t>{30, 20, 10}));
    EXPECT_EQ(t.lineage(10), (std::vector<uint32_t>{10}));
    EXPECT_EQ(t.parent(99), 0u);
    t.add(10, 30); // a cycle (pids reused) stops at 64
    EXPECT_EQ(t.lineage(30).size(), 64u);
}

TEST(Completion, KeepsForkParentsAndPassesOtherRecordsAsTheyAre)
{
    proc::ProcessTree tree;
    capture::Completion c(lotus_py_layout{}, tree);
    lotus_proc_event fork{};
    fork.h.type = LOTUS_EV_FORK;
    fork.h.tgid = 42;
    fork.parent_tgid = 7;
    auto [data, len] = c.complete(&fork, sizeof(fork));
    EXPECT_EQ(data, &fork); // nothing to complete: the record itself
    EXPECT_EQ(len, sizeof(fork));
    EXPECT_EQ(tree.parent(42), 7u);
    lotus_proc_event exec{};
    exec.h.type = LOTUS_EV_EXEC;
    exec.h.tgid = 43;
    c.complete(&exec, sizeof(exec));
    EXPECT_EQ(tree.parent(43), 0u);
}
