// Role spaces (lotus_abi.h): which processes see which descriptions of code objects and types.
#include <gtest/gtest.h>

#include "lotus_abi.h"
#include "model/role_spaces.h"

namespace lotus {
namespace {

constexpr uint32_t P = 100, A = 101, B = 102;
constexpr uint64_t X = 0x7000;

model::CodeDesc desc(const std::string& name)
{
    model::CodeDesc d;
    d.info.name = name;
    d.info.file = "x.py";
    return d;
}

std::string name_of(const model::RoleSpaces& s, uint32_t tgid, uint64_t code, bool own = false)
{
    auto* d = s.code(tgid, code, own);
    return d ? d->info.name : "-";
}

TEST(RoleSpaces, AProcessIsInItsOwnSpaceUntilItJoinsAnother)
{
    model::RoleSpaces s;
    EXPECT_EQ(s.space_of(P), P);
    s.add_code(P, X, desc("f"), false);
    EXPECT_EQ(name_of(s, P, X), "f");
    EXPECT_EQ(name_of(s, A, X), "-");
    s.forked(A, P, P);
    EXPECT_EQ(s.space_of(A), P);
    EXPECT_EQ(name_of(s, A, X), "f");
}

TEST(RoleSpaces, ForkWithoutANamedSpaceJoinsTheParentsAndExecWithoutOneGetsAFreshOne)
{
    model::RoleSpaces s; // ABI 2 files name no space
    s.add_code(P, X, desc("f"), false);
    s.forked(A, P, 0);
    EXPECT_EQ(name_of(s, A, X), "f");
    s.execed(A, 0);
    EXPECT_NE(s.space_of(A), P);
    EXPECT_EQ(name_of(s, A, X), "-");
    EXPECT_EQ(name_of(s, P, X), "f");
}

TEST(RoleSpaces, AProcesssOwnDescriptionsAreItsAlone)
{
    // Two siblings made different code objects at one address after the fork: BPF keeps the space's for the
    // first describer and describes the other's as its own (each entry record says which it went by).
    model::RoleSpaces s;
    s.forked(A, P, P);
    s.forked(B, P, P);
    s.add_code(A, X, desc("from_a"), false);
    s.add_code(B, X, desc("from_b"), true);
    EXPECT_EQ(name_of(s, A, X), "from_a");
    EXPECT_EQ(name_of(s, B, X, true), "from_b");
    EXPECT_EQ(name_of(s, B, X), "from_a"); // the object at X in B is the space's again (BPF's fingerprint says)
    EXPECT_EQ(name_of(s, A, X, true), "-");
    EXPECT_EQ(name_of(s, P, X), "from_a");
    s.add_code(B, X, desc("again_b"), false); // a description for the space: everyone sees it there
    EXPECT_EQ(name_of(s, A, X), "again_b");
    EXPECT_EQ(name_of(s, B, X), "again_b");
    s.add_type(A, X, model::TypeDesc{"TA", {}});
    s.add_type(B, X, model::TypeDesc{"TB", {}}, true);
    EXPECT_EQ(s.type(B, X)->name, "TA");
    EXPECT_EQ(s.type(B, X, true)->name, "TB");
    EXPECT_EQ(s.type(B, X + 1), nullptr);
}

TEST(RoleSpaces, ASpaceIsForgottenWhenItsLastProcessLeaves)
{
    model::RoleSpaces s;
    s.add_code(P, X, desc("f"), false);
    s.forked(A, P, P);
    s.forked(B, A, P);
    s.exited(P);
    s.exited(A);
    EXPECT_EQ(name_of(s, B, X), "f");
    EXPECT_EQ(s.spaces(), 1u);
    constexpr uint32_t kNew = LOTUS_SPACE_EXEC_BASE + 1;
    s.execed(B, kNew);
    EXPECT_EQ(s.space_of(B), kNew);
    EXPECT_EQ(name_of(s, B, X), "-");
    s.add_code(B, X, desc("g"), false);
    EXPECT_EQ(s.spaces(), 1u); // P's space had no process left
    s.exited(B);
    EXPECT_EQ(s.spaces(), 0u);
}

} // namespace
} // namespace lotus
