// The commands' library (userspace/cli) and the stream's first stages in capture, without BPF.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>

#include <sys/stat.h>

#include "capture/descriptions.h"
#include "cli/agent.h"
#include "cli/reconstruction.h"
#include "cli/rules_file.h"
#include "cli/sweep.h"
#include "model/framework.h"

#include <functional>
#include <nlohmann/json.hpp>
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

// The built-in knowledge written out as a rules file reads back as the same table; a file that leaves a key out,
// or names a kind or flag that does not exist, is refused with the key at fault.
TEST(Cli, TheBuiltinRulesReadBackAsTheyAre)
{
    const auto& builtin = model::framework::builtin();
    EXPECT_EQ(cli::parse_framework(nlohmann::json(cli::framework_json(builtin)), "f"), builtin);
    auto path = std::filesystem::temp_directory_path() / fmt::format("lotus-builtin-{}.json", getpid());
    ASSERT_EQ(cli::write_builtin_rules(path), 0);
    auto file = cli::load_rules_file(path);
    std::filesystem::remove(path);
    ASSERT_TRUE(file.framework);
    EXPECT_EQ(*file.framework, builtin);
    EXPECT_TRUE(file.pipelines.empty() && file.spans.empty());
    EXPECT_EQ(cli::write_builtin_rules("/nonexistent-dir/rules.json"), 74); // one line on stderr, no abort

    auto refused = [&](const std::function<void(nlohmann::json&)>& change) {
        nlohmann::json j = cli::framework_json(builtin);
        change(j);
        try {
            cli::parse_framework(j, "f.json");
        } catch (const std::runtime_error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_EQ(refused([](auto& j) { j.erase("worker_module"); }), "f.json: \"framework\": \"worker_module\" is missing");
    EXPECT_EQ(refused([](auto& j) { j["code"][0]["kind"] = "span"; }),
              "f.json: \"framework\" code row 0: unknown kind \"span\"");
    EXPECT_EQ(refused([](auto& j) { j["code"][1]["flags"].push_back("fast"); }),
              "f.json: \"framework\" code row 1: unknown flag \"fast\"");
    EXPECT_EQ(refused([](auto& j) { j["extra"] = 1; }), "f.json: \"framework\": unknown key \"extra\"");
    // Rows that would do nothing: a capture without locals, locals without the flag, more locals than BPF reports,
    // a worker loop that captures nothing.
    EXPECT_EQ(refused([](auto& j) { j["code"][0]["locals"] = nlohmann::json::array(); }),
              "f.json: \"framework\" code row 0: the \"capture\" flag and \"locals\" go together");
    EXPECT_EQ(refused([](auto& j) { j["code"][2]["locals"] = {"self"}; }),
              "f.json: \"framework\" code row 2: the \"capture\" flag and \"locals\" go together");
    EXPECT_EQ(refused([](auto& j) { j["code"][0]["locals"] = {"a", "b", "c"}; }),
              "f.json: \"framework\" code row 0: at most 2 locals");
    EXPECT_EQ(refused([](auto& j) {
                  j["code"][0]["flags"] = nlohmann::json::array();
                  j["code"][0]["locals"] = nlohmann::json::array();
              }),
              "f.json: \"framework\" code row 0: a worker_loop row captures its local (\"capture\", \"locals\")");
    EXPECT_EQ(refused([](auto& j) { j["native_set"][0].erase("symbol"); }),
              "f.json: \"framework\" native_set: \"symbol\" is missing");
}

// The knowledge a Rules object is given is the one it classifies with: a container class added in the table
// makes its calls a container's, and a pipeline class taken out is no pipeline.
TEST(Cli, RulesClassifyWithTheKnowledgeTheyAreGiven)
{
    auto fw = std::make_shared<model::framework::Framework>(model::framework::builtin());
    fw->container_classes.push_back("Twice");
    fw->pipeline_class = "Chain";
    model::Rules rules({}, {}, fw);
    EXPECT_EQ(rules.classify_type("Twice", {}).kind, model::TypeKind::Container);
    EXPECT_EQ(rules.classify_type("Chain", {}).kind, model::TypeKind::Pipeline);
    EXPECT_EQ(rules.classify_type("torchvision.transforms.transforms.Compose", {}).kind, model::TypeKind::Other);
    model::Rules builtin;
    EXPECT_EQ(builtin.classify_type("Twice", {}).kind, model::TypeKind::Other);
    EXPECT_EQ(builtin.classify_type("Compose", {}).kind, model::TypeKind::Pipeline);
}

TEST(Agent, AJobsNameInAFileNameIsASafeBaseName)
{
    // The job chooses its command line and environment (setproctitle, -m, SLURM_JOB_ID).
    EXPECT_EQ(cli::file_name_part("train.py"), "train.py");
    EXPECT_EQ(cli::file_name_part("../../x"), "x");
    EXPECT_EQ(cli::file_name_part("../../../../DIR/x\xff\x1b]0;x\a"), "x___0_x_");
    EXPECT_EQ(cli::file_name_part(".."), "job");
    EXPECT_EQ(cli::file_name_part("/"), "job");
    EXPECT_EQ(cli::file_name_part(".hidden..name"), "hidden.name");
    EXPECT_EQ(cli::file_name_part("2026-12-03T14:45:37Z"), "2026-12-03T14_45_37Z");
    EXPECT_EQ(cli::file_name_part(std::string(300, 'a')).size(), 64u);
}

TEST(Agent, EqualRecordNamesNeverReplaceAFileAndAreTheOwnersOnly)
{
    auto dir = std::filesystem::temp_directory_path() / fmt::format("lotus-reserve-{}", getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
        std::ofstream(dir / "x-1.lbt") << "an older record";
    }
    std::filesystem::create_symlink("/nonexistent-target", dir / "x-1-2.lbt"); // a link is not followed
    umask(022);
    std::string a = cli::reserve_record(dir.string(), "x-1"), b = cli::reserve_record(dir.string(), "x-1");
    EXPECT_EQ(a, (dir / "x-1-3.lbt").string());
    EXPECT_EQ(b, (dir / "x-1-4.lbt").string());
    std::ifstream older(dir / "x-1.lbt");
    std::string kept((std::istreambuf_iterator<char>(older)), std::istreambuf_iterator<char>());
    EXPECT_EQ(kept, "an older record");
    EXPECT_FALSE(std::filesystem::exists("/nonexistent-target"));
    struct stat st{};
    ASSERT_EQ(stat(a.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(cli::reserve_record((dir / "missing").string(), "x"), "");
    std::filesystem::remove_all(dir);
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

TEST(Sweep, ParamsCrossTheLimitsAndFillTheirPlaceholders)
{
    cli::SweepOptions o;
    o.params = {{"workers", {"1", "2"}}, {"batch", {"32"}}};
    o.cpus = {"1", "2"};
    o.command = {"python3", "job.py", "--workers", "{workers}", "--batch-size={batch}"};
    auto configs = cli::sweep_configs(o);
    ASSERT_EQ(configs.size(), 4u);
    EXPECT_EQ(configs[0].name, "workers=1_batch=32_cpus-1");
    EXPECT_EQ(configs[3].name, "workers=2_batch=32_cpus-2");
    EXPECT_EQ(configs[3].command, (std::vector<std::string>{"python3", "job.py", "--workers", "2", "--batch-size=32"}));
    EXPECT_EQ(configs[1].cpus, "2");
    // A placeholder no --param names, and a --param the command never uses: refused.
    o.command = {"python3", "job.py", "--workers", "{workers}", "{batch}", "{seed}"};
    EXPECT_THROW(cli::sweep_configs(o), std::invalid_argument);
    o.command = {"python3", "job.py", "--workers", "{workers}"};
    EXPECT_THROW(cli::sweep_configs(o), std::invalid_argument);
    // Braces that are no placeholder (a JSON argument) are left as they are.
    o.params = {{"workers", {"1"}}};
    o.cpus.clear();
    o.command = {"python3", "-c", "d = {'a': 1}", "{workers}"};
    EXPECT_EQ(cli::sweep_configs(o)[0].command[2], "d = {'a': 1}");
}

TEST(Sweep, TheBestAndTheCheapestWithinFivePercent)
{
    // samples/s, CPUs, memory
    std::vector<cli::SweepCost> rows{{100, 4, 900}, {97, 2, 800}, {96, 2, 700}, {80, 1, 500}, {-1, 0.5, 100}};
    auto [best, cheapest] = cli::best_and_cheapest(rows);
    EXPECT_EQ(best, 0);
    EXPECT_EQ(cheapest, 2); // 2 CPUs like row 1, less memory; row 3 is more than 5 % slower; row 4 has no figures
    EXPECT_EQ(cli::best_and_cheapest({{-1, 1, 1}}), (std::pair<int, int>{-1, -1}));
    EXPECT_EQ(cli::best_and_cheapest({{50, 1, 1}}), (std::pair<int, int>{0, 0}));
}

TEST(Sweep, ParamValuesNeverLeaveTheOutputDirectory)
{
    cli::SweepOptions o;
    o.params = {{"w", {"../x", "a/b", "a_b", "/etc/passwd", "..", std::string(300, 'v'), std::string(300, 'v') + "z"}}};
    o.command = {"python3", "job.py", "{w}"};
    auto configs = cli::sweep_configs(o);
    ASSERT_EQ(configs.size(), 7u);
    std::set<std::string> names;
    for (const auto& c : configs) {
        EXPECT_EQ(c.name.find('/'), std::string::npos) << c.name;
        EXPECT_LE(c.name.size(), 200u) << c.name;
        EXPECT_NE(c.name, ".");
        EXPECT_NE(c.name, "..");
        names.insert(c.name);
    }
    EXPECT_EQ(names.size(), configs.size()); // no two runs write the same files
    EXPECT_EQ(configs[0].name, "w=.._x");
    EXPECT_EQ(configs[1].name, "w=a_b");
    EXPECT_EQ(configs[2].name, "w=a_b-2");
    EXPECT_EQ(configs[3].name, "w=_etc_passwd");
    // The job still gets the values as given.
    EXPECT_EQ(configs[0].command[2], "../x");
    EXPECT_EQ(configs[0].params[0].second, "../x");
}

TEST(Sweep, OutputDirectoryIsItsOwnAndItsFilesNoLinks)
{
    namespace fs = std::filesystem;
    auto root = fs::temp_directory_path() / fmt::format("lotus-sweep-dir-{}", getpid());
    fs::remove_all(root);
    fs::create_directories(root);
    auto refused = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "";
    };
    uid_t me = geteuid();
    // Made now: marked as the sweep's; made by an earlier sweep: taken again.
    std::string dir = (root / "out").string();
    EXPECT_TRUE(cli::open_sweep_dir(dir, me));
    EXPECT_TRUE(fs::is_regular_file(root / "out" / cli::kSweepMark));
    auto fd = cli::open_sweep_dir(dir, me);
    ASSERT_TRUE(fd);
    // Another user's (the same directory, seen by someone else), one it did not make, a link to a directory.
    EXPECT_NE(refused([&] { cli::open_sweep_dir(dir, me + 1); }).find("owned by another user"), std::string::npos);
    fs::create_directories(root / "mine");
    EXPECT_NE(refused([&] { cli::open_sweep_dir((root / "mine").string(), me); }).find("not made by lotus-bpf sweep"),
              std::string::npos);
    fs::create_directory_symlink(root / "out", root / "link");
    EXPECT_NE(refused([&] { cli::open_sweep_dir((root / "link").string(), me); }).find("not a directory"),
              std::string::npos);

    // A run's file: written and emptied when it is the sweep's; a planted link or hard link is refused, and the
    // file it points to keeps its bytes.
    {
        std::ofstream(root / "out" / "a.txt") << "an earlier run's summary";
        auto txt = cli::open_run_file(fd.get(), "a.txt", me);
        ASSERT_TRUE(txt);
        EXPECT_EQ(fs::file_size(root / "out" / "a.txt"), 0u);
    }
    std::ofstream(root / "victim") << "keep me";
    fs::create_symlink(root / "victim", root / "out" / "b.txt");
    EXPECT_NE(refused([&] { cli::open_run_file(fd.get(), "b.txt", me); }).find("b.txt: it is a symbolic link"),
              std::string::npos);
    fs::create_hard_link(root / "victim", root / "out" / "c.txt");
    EXPECT_NE(refused([&] { cli::open_run_file(fd.get(), "c.txt", me); }).find("c.txt: a hard link"),
              std::string::npos);
    EXPECT_EQ(fs::file_size(root / "victim"), 7u);
    fs::remove_all(root);
}
