// co_linetable decoding against what CPython itself says: the tables and each instruction range's line below were
// printed by code.co_lines() of CPython 3.11.2 (Debian) and 3.10.13 (pyenv) for the same function.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "cpython/line_table.h"

using lotus::cpython::line_for;

namespace {

// def f(x):                     line 1
//     y = x + 1                 2
//                               3
//     if y > 2:                 4
//         z = [i * 2            5
//              for i in range(y)]   6
//         return z              7
//     for k in range(1000):     8
//         y += k                9
//     return (y,                10
//             x)                11
const std::vector<uint8_t> kTable311 = {
    128, 0,   216, 8,   9,   136, 65,  137, 5,   128, 65,  224, 7,   8,   136, 49,  130, 117, 128, 117, 240, 2,
    1,   13,  32,  240, 0,   1,   13,  32,  221, 22,  27,  152, 65,  145, 104, 148, 104, 240, 3,   1,   13,  32,
    241, 0,   1,   13,  32,  244, 0,   1,   13,  32,  136, 1,   224, 15,  16,  136, 8,   221, 13,  18,  144, 52,
    137, 91,  140, 91,  240, 0,   1,   5,   15,  240, 0,   1,   5,   15,  136, 1,   216, 8,   9,   136, 81,  137,
    6,   136, 1,   136, 1,   216, 12,  13,  216, 12,  13,  240, 3,   1,   12,  15,  240, 0,   1,   5,   15};
const std::vector<std::tuple<int, int, int>> kLines311 = {
    {0, 2, 1},     {2, 4, 2},     {4, 6, 2},     {6, 10, 2},    {10, 12, 2},   {12, 14, 4},   {14, 16, 4},
    {16, 22, 4},   {22, 24, 4},   {24, 26, 5},   {26, 28, 5},   {28, 40, 6},   {40, 42, 6},   {42, 46, 6},
    {46, 56, 6},   {56, 58, 5},   {58, 62, 5},   {62, 72, 5},   {72, 74, 5},   {74, 76, 7},   {76, 78, 7},
    {78, 90, 8},   {90, 92, 8},   {92, 96, 8},   {96, 106, 8},  {106, 108, 8}, {108, 110, 8}, {110, 112, 8},
    {112, 114, 9}, {114, 116, 9}, {116, 120, 9}, {120, 122, 9}, {122, 124, 9}, {124, 126, 10}, {126, 128, 11},
    {128, 130, 10}, {130, 132, 10}};
const std::vector<uint8_t> kTable310 = {8, 1, 8, 2, 6, 1, 6, 1, 6, 255, 4, 2, 12, 1, 10, 1, 2, 1, 2, 1, 4, 255};
const std::vector<std::tuple<int, int, int>> kLines310 = {{0, 8, 2},   {8, 16, 4},  {16, 22, 5},  {22, 28, 6},
                                                          {28, 34, 5}, {34, 38, 7}, {38, 50, 8},  {50, 60, 9},
                                                          {60, 62, 10}, {62, 64, 11}, {64, 68, 10}};

void expect_lines(const std::vector<uint8_t>& table, int format, const std::vector<std::tuple<int, int, int>>& lines)
{
    for (auto [start, end, line] : lines)
        for (int addr = start; addr < end; addr += 2)
            EXPECT_EQ(line_for(table.data(), table.size(), format, 1, addr), line) << "addr " << addr;
    auto end = std::get<1>(lines.back());
    EXPECT_EQ(line_for(table.data(), table.size(), format, 1, end), std::nullopt) << "past the table";
}

} // namespace

TEST(LineTable, LocationTableOf311GivesCPythonsLines) { expect_lines(kTable311, 311, kLines311); }

TEST(LineTable, PairsOf310GiveCPythonsLines) { expect_lines(kTable310, 310, kLines310); }

TEST(LineTable, BeforeTheFirstInstructionIsTheFirstLine)
{
    EXPECT_EQ(line_for(kTable311.data(), kTable311.size(), 311, 7, -2), 7);
}

TEST(LineTable, ATornTableGivesNoLine)
{
    std::vector<uint8_t> torn(kTable311.begin() + 3, kTable311.end()); // starts mid-entry
    EXPECT_EQ(line_for(torn.data(), torn.size(), 311, 1, 0), std::nullopt);
    std::vector<uint8_t> cut(kTable311.begin(), kTable311.begin() + 9); // ends mid-entry
    EXPECT_EQ(line_for(cut.data(), cut.size(), 311, 1, 40), std::nullopt);
    EXPECT_EQ(line_for(kTable311.data(), kTable311.size(), 999, 1, 0), std::nullopt) << "an unknown format";
}
