// Names BPF could not read, read by capture from the target's memory: here this test process's own, laid out
// as a CPython type chain and str objects would be.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "capture/descriptions.h"
#include "model/engine.h"
#include "fake_requests.h"

using namespace lotus;

namespace {

struct FakeType {
    uint64_t refcnt = 1;
    const char* name;
    const FakeType* base;
};

// A compact ASCII str as CPython lays it out: state word, length, then the text.
struct FakeStr {
    uint64_t pad[2] = {};
    int64_t length;
    uint32_t state;
    uint32_t pad2 = 0;
    char text[32];
};

lotus_py_layout fake_layout()
{
    lotus_py_layout l{};
    l.type_name = offsetof(FakeType, name);
    l.type_base = offsetof(FakeType, base);
    l.unicode_length = offsetof(FakeStr, length);
    l.unicode_state = offsetof(FakeStr, state);
    l.unicode_ascii_bit = 6;
    l.unicode_kind_shift = 2;
    l.unicode_ascii_data = offsetof(FakeStr, text);
    l.unicode_compact_data = offsetof(FakeStr, text);
    l.object_type = 0; // (the fake code object's first word)
    l.code_name = 8;
    l.code_filename = 16;
    return l;
}

lotus_type_info type_record(const void* type, uint8_t unread)
{
    lotus_type_info t{};
    t.h.type = LOTUS_EV_TYPE;
    t.h.tgid = t.h.tid = static_cast<uint32_t>(getpid());
    t.type = reinterpret_cast<uint64_t>(type);
    t.unread = unread;
    return t;
}

lotus_type_info completed(const lotus_type_info& t, std::vector<uint32_t> pids)
{
    auto out = capture::complete_description(&t, sizeof(t), pids, fake_layout());
    lotus_type_info r{};
    EXPECT_EQ(out.size(), sizeof(r));
    memcpy(&r, out.data(), sizeof(r));
    return r;
}

// A pid that no process has any more: a child that exited and was reaped.
uint32_t gone_pid()
{
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, nullptr, 0);
    return static_cast<uint32_t>(child);
}

} // namespace

TEST(Descriptions, ATypesUnreadNameAndBasesAreReadFromTheProcess)
{
    FakeType object{1, "object", nullptr}, compose{1, "Compose", &object}, mine{1, "MyCompose", &compose};
    auto t = type_record(&mine, 1 | 2); // the name and the first base, as BPF left them
    strcpy(t.bases[1], "object");
    ASSERT_TRUE(capture::incomplete_description(&t, sizeof(t)));
    auto r = completed(t, {static_cast<uint32_t>(getpid())});
    EXPECT_EQ(r.unread, 0);
    EXPECT_STREQ(r.name, "MyCompose");
    EXPECT_STREQ(r.bases[0], "Compose");
    EXPECT_STREQ(r.bases[1], "object");
    EXPECT_STREQ(r.bases[2], "");
    EXPECT_FALSE(capture::incomplete_description(&r, sizeof(r)));
}

TEST(Descriptions, ANameEndingRightBeforeAnUnmappedPageIsRead)
{
    long page = sysconf(_SC_PAGESIZE);
    auto* mem = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(mem, MAP_FAILED);
    ASSERT_EQ(munmap(mem + page, page), 0);
    char* name = mem + page - 5;
    strcpy(name, "cell");
    FakeType cell{1, name, nullptr};
    auto r = completed(type_record(&cell, 1), {static_cast<uint32_t>(getpid())});
    EXPECT_EQ(r.unread, 0);
    EXPECT_STREQ(r.name, "cell");
    munmap(mem, page);
}

TEST(Descriptions, AnExitedProcessIsReadThroughItsParent)
{
    FakeType cell{1, "cell", nullptr};
    auto r = completed(type_record(&cell, 1), {gone_pid(), static_cast<uint32_t>(getpid())});
    EXPECT_EQ(r.unread, 0);
    EXPECT_STREQ(r.name, "cell");
}

TEST(Descriptions, WhatNoProcessCanReadStaysMarked)
{
    FakeType object{1, "object", nullptr};
    FakeType broken{1, reinterpret_cast<const char*>(16), &object};
    auto r = completed(type_record(&broken, 1 | 2), {gone_pid(), static_cast<uint32_t>(getpid())});
    EXPECT_EQ(r.unread, 1); // its own name: unreadable everywhere
    EXPECT_STREQ(r.name, "");
    EXPECT_STREQ(r.bases[0], "object");
}

TEST(Descriptions, ACodeObjectsUnreadNamesAreReadAsStrObjects)
{
    FakeStr qualname{}, file{};
    qualname.length = 16;
    qualname.state = 1u << 6; // ASCII
    strcpy(qualname.text, "Compose.__call__");
    file.length = 2;
    file.state = 1u << 2; // kind 1, not ASCII: "\xe9t" as latin-1 bytes
    memcpy(file.text, "\xe9t", 2);
    FakeType code_type{1, "code", nullptr};
    uint64_t code[3] = {reinterpret_cast<uint64_t>(&code_type), reinterpret_cast<uint64_t>(&qualname),
                        reinterpret_cast<uint64_t>(&file)};
    lotus_code_info c{};
    c.h.type = LOTUS_EV_CODE;
    c.code = reinterpret_cast<uint64_t>(code);
    c.name_kind = 0xff;
    c.file_kind = 0xff;
    ASSERT_TRUE(capture::incomplete_description(&c, sizeof(c)));
    auto out = capture::complete_description(&c, sizeof(c), {static_cast<uint32_t>(getpid())}, fake_layout());
    lotus_code_info r{};
    memcpy(&r, out.data(), sizeof(r));
    EXPECT_EQ(r.name_kind, 0);
    EXPECT_STREQ(r.name, "Compose.__call__");
    EXPECT_EQ(r.file_kind, 1);
    EXPECT_EQ(std::string(r.file, 2), "\xe9t");
    EXPECT_FALSE(capture::incomplete_description(&r, sizeof(r)));
    // the same fields on an object that is not code (a frame's executable may be None): left unread
    FakeType none_type{1, "NoneType", nullptr};
    code[0] = reinterpret_cast<uint64_t>(&none_type);
    out = capture::complete_description(&c, sizeof(c), {static_cast<uint32_t>(getpid())}, fake_layout());
    memcpy(&r, out.data(), sizeof(r));
    EXPECT_EQ(r.name_kind, 0xff);
    EXPECT_EQ(r.file_kind, 0xff);
}

TEST(Descriptions, OtherRecordsAndCompleteOnesAreLeftAlone)
{
    lotus_type_info t = type_record(nullptr, 0);
    strcpy(t.name, "Compose");
    EXPECT_FALSE(capture::incomplete_description(&t, sizeof(t)));
    EXPECT_FALSE(capture::incomplete_description(&t, sizeof(t) - 1)); // too short to be one
    lotus_py_return r{};
    r.h.type = LOTUS_EV_PY_RETURN;
    EXPECT_FALSE(capture::incomplete_description(&r, sizeof(r)));
}

// The engine leaves a type whose name stayed unread unclassified: BPF keeps emitting its objects' calls.
TEST(Descriptions, TheEngineDoesNotClassifyATypeWithoutItsName)
{
    model::Rules rules;
    std::vector<std::pair<uint64_t, uint32_t>> told; // what BPF is told: type, LOTUS_TYPE_* flags
    test::FakeRequests requests{{}, [&](uint32_t, uint64_t type, uint64_t, uint32_t flags) { told.emplace_back(type, flags); }};
    model::Engine engine(rules, [](const model::Span&) {}, &requests);
    auto t = type_record(reinterpret_cast<void*>(0x5000), 1);
    t.h.tgid = t.h.tid = 7;
    engine.consume(&t, sizeof(t));
    EXPECT_TRUE(told.empty());
    t.unread = 0;
    strcpy(t.name, "Compose");
    engine.consume(&t, sizeof(t));
    ASSERT_EQ(told.size(), 1u);
    EXPECT_EQ(told[0].first, 0x5000u);
    EXPECT_TRUE(told[0].second & LOTUS_TYPE_PIPELINE);
}

// What the engine tells BPF of a code object or a type names the object described (the fingerprint its record
// carried), for BPF's entry at the address may hold another object by then. A record of an older file (ABI 9,
// no fingerprint) is read with 0 there.
TEST(Descriptions, RolesToldBackCarryTheFingerprintOfTheObjectDescribed)
{
    model::Rules rules({}, {"nest"});
    std::vector<std::pair<uint64_t, uint32_t>> codes, types; // fingerprint, flags
    test::FakeRequests requests{
        [&](uint32_t, uint32_t, uint64_t, uint64_t fp, const model::CodeRole& r) { codes.emplace_back(fp, r.flags); },
        [&](uint32_t, uint64_t, uint64_t fp, uint32_t flags) { types.emplace_back(fp, flags); }};
    model::Engine engine(rules, [](const model::Span&) {}, &requests);
    lotus_code_info c{};
    c.h.type = LOTUS_EV_CODE;
    c.h.tgid = c.h.tid = 7;
    c.code = 0x7000;
    strcpy(c.name, "other");
    c.fingerprint = 0x111;
    engine.consume(&c, sizeof(c));
    strcpy(c.name, "nest"); // another code object at the address
    c.fingerprint = 0x222;
    engine.consume(&c, sizeof(c));
    c.fingerprint = 0x333;
    engine.consume(&c, offsetof(lotus_code_info, fingerprint));
    ASSERT_EQ(codes.size(), 3u);
    EXPECT_EQ(codes[0].first, 0x111u);
    EXPECT_TRUE(codes[0].second & LOTUS_ROLE_SKIP);
    EXPECT_EQ(codes[1].first, 0x222u);
    EXPECT_FALSE(codes[1].second & LOTUS_ROLE_SKIP); // named by --span: seen
    EXPECT_EQ(codes[2].first, 0u);
    auto t = type_record(reinterpret_cast<void*>(0x5000), 0);
    strcpy(t.name, "Compose");
    t.fingerprint = 0x444;
    engine.consume(&t, sizeof(t));
    ASSERT_EQ(types.size(), 1u);
    EXPECT_EQ(types[0].first, 0x444u);
}
