// common::printable: what a text output makes of the names a traced process chooses.
#include <gtest/gtest.h>

#include <string>

#include "common/printable.h"

using lotus::common::printable;
using lotus::common::printable_lines;

namespace {

// No byte of s is a C0 control, DEL, or the lead of a C1 control in UTF-8.
bool no_control_byte(const std::string& s, bool newline_allowed = false)
{
    for (size_t i = 0; i < s.size(); i++) {
        auto c = static_cast<unsigned char>(s[i]);
        if ((c < 0x20 && !(newline_allowed && c == '\n')) || c == 0x7f)
            return false;
        if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xa0)
            return false;
        if (c >= 0x80 && c < 0xc0 && (i == 0 || static_cast<unsigned char>(s[i - 1]) < 0x80))
            return false; // a continuation byte with no lead: invalid UTF-8 let through
    }
    return true;
}

} // namespace

TEST(Printable, KeepsPrintableTextAsIs)
{
    for (std::string s : {"", "RandomResizedCrop", "Resize (in Compose)", "/data/imagenet/train", "C:\\path\\x1b",
                          "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x90\x8d", "\xc2\xa0nbsp", "~!@#$%^&*()"})
        EXPECT_EQ(printable(s), s) << s;
}

TEST(Printable, EscapesAnOscTitleSequence)
{
    // The class name: an OSC that retitles the terminal, ended by BEL.
    std::string name = "\x1b]0;x\x07";
    EXPECT_EQ(printable(name), "\\e]0;x\\a");
    EXPECT_EQ(printable("Evil" + name + "Crop"), "Evil\\e]0;x\\aCrop");
}

TEST(Printable, EscapesEveryC0ControlAndDel)
{
    EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
    EXPECT_EQ(printable("\a\b\t\n\v\f\r\x1b"), "\\a\\b\\t\\n\\v\\f\\r\\e");
    EXPECT_EQ(printable("\x01\x1f\x7f"), "\\x01\\x1f\\x7f");
    for (int c = 0; c < 0x20; c++) {
        std::string s(1, static_cast<char>(c));
        EXPECT_TRUE(no_control_byte(printable(s))) << c;
        EXPECT_EQ(printable(s)[0], '\\') << c;
    }
}

TEST(Printable, EscapesC1ControlsAsCodePoints)
{
    EXPECT_EQ(printable("\xc2\x80"), "\\u0080");
    EXPECT_EQ(printable("\xc2\x9b" "31m"), "\\u009b31m"); // CSI
    EXPECT_EQ(printable("x\xc2\x9d" "0;t\xc2\x9c"), "x\\u009d0;t\\u009c"); // OSC ... ST
    EXPECT_EQ(printable("\xc2\x9f\xc2\xa0"), "\\u009f\xc2\xa0"); // U+00A0 is printable
}

TEST(Printable, ReplacesInvalidUtf8BytesWithTheirHex)
{
    EXPECT_EQ(printable("x\xff"), "x\\xff");
    EXPECT_EQ(printable("\x9b" "31m"), "\\x9b31m"); // a raw 8-bit CSI is no UTF-8
    EXPECT_EQ(printable("\xc3"), "\\xc3");          // cut sequence
    EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf"); // overlong '/'
    EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80"); // a surrogate
    EXPECT_EQ(printable("../../x\xff\x1b]0;x\x07"), "../../x\\xff\\e]0;x\\a");
}

TEST(Printable, IsIdempotent)
{
    std::string hostile = std::string("\x1b[2J\r\n\t\0\x7f\xc2\x85\xff\xe2\x80", 14) + "name";
    std::string once = printable(hostile);
    EXPECT_TRUE(no_control_byte(once));
    EXPECT_EQ(printable(once), once);
    EXPECT_EQ(printable_lines(once), once);
}

TEST(Printable, LinesKeepsNewlinesOnly)
{
    EXPECT_EQ(printable_lines("op\nRandomCrop\x1b[31m\r\n"), "op\nRandomCrop\\e[31m\\r\n");
    std::string out = printable_lines("a\x1b\x07\x9b\xc2\x9b\tb\n");
    EXPECT_TRUE(no_control_byte(out, true));
    EXPECT_EQ(out, "a\\e\\a\\x9b\\u009b\\tb\n");
}
