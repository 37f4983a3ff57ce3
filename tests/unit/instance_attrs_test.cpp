// Instance attributes read from real interpreters of each version (pyenv's 3.10-3.13, Debian's 3.11, 3.14, 3.15,
// where present): each layout of an instance's attributes (a dict at tp_dictoffset, managed values, a materialized
// dict, inline values), a larger table, a deleted attribute, a subclass.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cpython/instance_attrs.h"

using namespace lotus::cpython;

namespace {

const char* kScript = R"(
import os, sys
class Plain: pass
class Sub(Plain): pass
class Many: pass
a = Plain(); a.dataset = object(); a.root = "/data/train"; a.n = 1
b = Plain(); b.dataset = object(); vars(b); b.extra = 2
c = Plain(); c.dataset = object(); c.other = 3; del c.dataset
d = Many()
for i in range(40): setattr(d, "f%d" % i, object())
d.root = "/r"
e = Sub(); e.root = "s"
print(os.getpid(), id(a), id(a.dataset), id(a.root), id(b), id(b.dataset), id(c), id(c.other), id(d), id(d.f39),
      id(d.root), id(e), flush=True)
sys.stdin.read()
)";

struct Target {
    FILE* pipe = nullptr;
    std::vector<uint64_t> ids; // pid, then the script's ids in order
    ~Target()
    {
        if (!ids.empty())
            kill(static_cast<pid_t>(ids[0]), SIGKILL);
        if (pipe)
            pclose(pipe);
    }
};

std::vector<std::pair<std::string, std::string>> interpreters()
{
    std::vector<std::pair<std::string, std::string>> out;
    for (std::string v : {"3.10.13", "3.11.7", "3.12.1", "3.13.0"}) {
        std::string minor = v.substr(0, v.rfind('.'));
        std::string exe = fmt::format("/root/.pyenv/versions/{}/bin/python{}", v, minor);
        if (access(exe.c_str(), X_OK) == 0)
            out.push_back({minor, exe});
    }
    if (access("/usr/bin/python3.11", X_OK) == 0)
        out.push_back({"3.11", "/usr/bin/python3.11"});
    // Debian's 3.14 and 3.15, as scripts/install-python.sh unpacks them
    for (std::string minor : {"3.14", "3.15"}) {
        std::string exe = fmt::format("/opt/lotus-bpf/python{0}/usr/bin/python{0}", minor);
        if (access(exe.c_str(), X_OK) == 0)
            out.push_back({minor, exe});
    }
    return out;
}

} // namespace

TEST(InstanceAttrs, ReadFromRealInterpretersOfEachVersion)
{
    auto pythons = interpreters();
    if (pythons.empty())
        GTEST_SKIP() << "no CPython 3.10-3.13 on this machine";
    for (const auto& [minor, exe] : pythons) {
        SCOPED_TRACE(exe);
        Target t;
        std::string script = "/tmp/lotus-instance-attrs-test.py";
        FILE* f = fopen(script.c_str(), "w");
        ASSERT_TRUE(f);
        fputs(kScript, f);
        fclose(f);
        t.pipe = popen(("exec " + exe + " -S " + script + " < /dev/zero").c_str(), "r");
        ASSERT_TRUE(t.pipe);
        char line[1024] = {};
        ASSERT_TRUE(fgets(line, sizeof(line), t.pipe));
        std::istringstream in(line);
        for (uint64_t v; in >> v;)
            t.ids.push_back(v);
        ASSERT_EQ(t.ids.size(), 12u);
        auto v = parse_version(minor);
        ASSERT_TRUE(v);
        auto layout = layout_for(*v);
        auto objects = object_layout_for(*v);
        ASSERT_TRUE(layout && objects);
        ProcessMemory mem(static_cast<int>(t.ids[0]));
        ObjectReader r(mem, *layout, *objects);
        auto [a, a_dataset, a_root, b, b_dataset, c, c_other, d, d_f39, d_root, e] =
            std::tuple{t.ids[1], t.ids[2], t.ids[3], t.ids[4], t.ids[5], t.ids[6], t.ids[7], t.ids[8], t.ids[9],
                       t.ids[10], t.ids[11]};
        EXPECT_EQ(r.attr(a, "dataset"), a_dataset);
        EXPECT_EQ(r.attr(a, "root"), a_root);
        EXPECT_EQ(r.ascii(a_root), "/data/train");
        EXPECT_EQ(r.ascii(a_dataset), std::nullopt) << "not a str";
        EXPECT_EQ(r.attr(a, "missing"), std::nullopt);
        EXPECT_EQ(r.attr(b, "dataset"), b_dataset) << "a materialized __dict__";
        EXPECT_TRUE(r.attr(b, "extra"));
        EXPECT_EQ(r.attr(c, "dataset"), std::nullopt) << "deleted";
        EXPECT_EQ(r.attr(c, "other"), c_other);
        EXPECT_EQ(r.attr(d, "f39"), d_f39) << "41 attributes";
        EXPECT_EQ(r.attr(d, "root"), d_root);
        EXPECT_EQ(r.classes(e), (std::vector<std::string>{"Sub", "Plain", "object"}));
        auto e_root = r.attr(e, "root");
        ASSERT_TRUE(e_root);
        EXPECT_EQ(r.ascii(*e_root), "s");
    }
}
