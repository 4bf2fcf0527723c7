// Day arithmetic and names for the daily partitions of outbox.events.
// Timestamps are PostgreSQL's: microseconds since 2000-01-01 00:00:00 UTC.
// Expected values were cross-checked with `date -u -d YYYY-MM-DD +%s`.
#include "core/partition_calendar.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {
namespace {

constexpr int64_t kUsecPerSec = 1000000;

// A PostgreSQL timestamp from Unix seconds (plus microseconds).
int64_t PgFromUnix(int64_t unix_seconds, int64_t usec = 0) {
  return (unix_seconds - kPgEpochUnixSeconds) * kUsecPerSec + usec;
}

// Unix seconds at 00:00:00 UTC, from `date -u -d ... +%s`.
constexpr int64_t kUnix19700101 = 0;
constexpr int64_t kUnix19991231 = 946598400;
constexpr int64_t kUnix20000229 = 951782400;
constexpr int64_t kUnix20240229 = 1709164800;
constexpr int64_t kUnix20261121 = 1795219200;
constexpr int64_t kUnix21000228 = 4107456000;
constexpr int64_t kUnix21000301 = 4107542400;

int64_t DayOfUnixMidnight(int64_t unix_seconds) { return DayOf(PgFromUnix(unix_seconds)); }

TEST(PartitionCalendar, PgEpochIsDayZero) {
  EXPECT_EQ(kPgEpochUnixSeconds, 946684800);
  EXPECT_EQ(DayOf(0), 0);
  EXPECT_EQ(DayStart(0), 0);
  EXPECT_EQ(DayEnd(0), kUsecPerDay);
  EXPECT_EQ(PartitionName(0), "events_p20000101");
  EXPECT_EQ(ParsePartitionName("events_p20000101"), 0);
  const CivilDate c = CivilFromDay(0);
  EXPECT_EQ(c.year, 2000);
  EXPECT_EQ(c.month, 1u);
  EXPECT_EQ(c.day, 1u);
}

TEST(PartitionCalendar, DayCoversMidnightToLastMicrosecond) {
  EXPECT_EQ(DayOf(kUsecPerDay - 1), 0);
  EXPECT_EQ(DayOf(kUsecPerDay), 1);
  const int64_t d = DayOfUnixMidnight(kUnix20261121);
  EXPECT_EQ(DayOf(PgFromUnix(kUnix20261121) - 1), d - 1);
  EXPECT_EQ(DayOf(PgFromUnix(kUnix20261121 + 86399, 999999)), d);
  EXPECT_EQ(DayOf(PgFromUnix(kUnix20261121 + 86400)), d + 1);
}

TEST(PartitionCalendar, KnownDateHasKnownDayStartAndName) {
  const int64_t d = DayOfUnixMidnight(kUnix20261121);
  EXPECT_EQ(d, 9821);
  EXPECT_EQ(DayOf(PgFromUnix(kUnix20261121 + 12 * 3600)), 9821);
  EXPECT_EQ(DayStart(9821), PgFromUnix(kUnix20261121));
  EXPECT_EQ(PartitionName(9821), "events_p20261121");
  EXPECT_EQ(ParsePartitionName("events_p20261121"), 9821);
}

TEST(PartitionCalendar, TimesBeforeTheEpochFloorToTheEarlierDay) {
  EXPECT_EQ(DayOf(-1), -1);  // 1999-12-31 23:59:59.999999
  EXPECT_EQ(DayOf(-kUsecPerDay), -1);
  EXPECT_EQ(DayOf(-kUsecPerDay + 1), -1);
  EXPECT_EQ(DayOf(-kUsecPerDay - 1), -2);
  EXPECT_EQ(DayStart(-1), -kUsecPerDay);
  EXPECT_EQ(DayEnd(-1), 0);
  EXPECT_EQ(DayOfUnixMidnight(kUnix19991231), -1);
  EXPECT_EQ(PartitionName(-1), "events_p19991231");
  EXPECT_EQ(ParsePartitionName("events_p19991231"), -1);
}

TEST(PartitionCalendar, UnixEpochIsDayMinus10957) {
  EXPECT_EQ(DayOfUnixMidnight(kUnix19700101), -10957);
  EXPECT_EQ(DayOf(PgFromUnix(kUnix19700101) - 1), -10958);
  EXPECT_EQ(PartitionName(-10957), "events_p19700101");
  EXPECT_EQ(PartitionName(-10958), "events_p19691231");
  EXPECT_EQ(ParsePartitionName("events_p19700101"), -10957);
}

TEST(PartitionCalendar, LeapDayInOrdinaryLeapYear) {
  const int64_t d = DayOfUnixMidnight(kUnix20240229);
  EXPECT_EQ(d, 8825);
  EXPECT_EQ(PartitionName(d - 1), "events_p20240228");
  EXPECT_EQ(PartitionName(d), "events_p20240229");
  EXPECT_EQ(PartitionName(d + 1), "events_p20240301");
  EXPECT_EQ(ParsePartitionName("events_p20240229"), d);
  EXPECT_EQ(ParsePartitionName("events_p20230229"), std::nullopt);
}

TEST(PartitionCalendar, Year2000IsALeapYearBecauseDivisibleBy400) {
  const int64_t d = DayOfUnixMidnight(kUnix20000229);
  EXPECT_EQ(d, 59);
  EXPECT_EQ(PartitionName(59), "events_p20000229");
  EXPECT_EQ(PartitionName(60), "events_p20000301");
  EXPECT_EQ(ParsePartitionName("events_p20000229"), 59);
}

TEST(PartitionCalendar, Year2100IsNotALeapYear) {
  const int64_t d = DayOfUnixMidnight(kUnix21000228);
  EXPECT_EQ(DayOfUnixMidnight(kUnix21000301), d + 1);
  EXPECT_EQ(PartitionName(d), "events_p21000228");
  EXPECT_EQ(PartitionName(d + 1), "events_p21000301");
  EXPECT_EQ(ParsePartitionName("events_p21000228"), d);
  EXPECT_EQ(ParsePartitionName("events_p21000229"), std::nullopt);
  EXPECT_EQ(ParsePartitionName("events_p21000301"), d + 1);
}

TEST(PartitionCalendar, DayEndIsNextDayStart) {
  for (int64_t d = -800000; d <= 3000000; d += 997) {
    ASSERT_EQ(DayEnd(d), DayStart(d + 1)) << d;
    ASSERT_EQ(DayEnd(d) - DayStart(d), kUsecPerDay) << d;
    ASSERT_EQ(DayOf(DayStart(d)), d) << d;
    ASSERT_EQ(DayOf(DayEnd(d) - 1), d) << d;
    ASSERT_EQ(DayOf(DayEnd(d)), d + 1) << d;
  }
}

TEST(PartitionCalendar, NamesAgreeWithTheCLibraryCalendar) {
  // An independent oracle: gmtime_r on the Unix time of each day's midnight.
  for (int64_t d = DayOfUnixMidnight(kUnix19700101) - 30000; d <= 60000; ++d) {
    const time_t t = static_cast<time_t>(kPgEpochUnixSeconds + d * 86400);
    struct tm tm {};
    ASSERT_NE(gmtime_r(&t, &tm), nullptr);
    char expected[64];
    std::snprintf(expected, sizeof expected, "events_p%04d%02d%02d", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday);
    ASSERT_EQ(PartitionName(d), expected) << "day " << d;
  }
}

TEST(PartitionCalendar, ParseRoundTripsEveryDayAndNamesSortInTimeOrder) {
  // 1600-01-01 .. 2400-12-31, around two 400-year cycles.
  const int64_t first = DayFromCivil({1600, 1, 1});
  const int64_t last = DayFromCivil({2400, 12, 31});
  ASSERT_GT(last - first, 290000);
  std::string previous;
  for (int64_t d = first; d <= last; ++d) {
    const std::string name = PartitionName(d);
    ASSERT_EQ(ParsePartitionName(name), d) << name;
    ASSERT_LT(previous, name) << "day " << d;
    previous = name;
  }
  EXPECT_EQ(PartitionName(first), "events_p16000101");
  EXPECT_EQ(PartitionName(last), "events_p24001231");
}

TEST(PartitionCalendar, FormatPartitionNameWritesTheSameNameIntoABuffer) {
  for (int64_t d : {int64_t{-10957}, int64_t{-1}, int64_t{0}, int64_t{59}, int64_t{9821},
                    DayFromCivil({9999, 12, 31})}) {
    char buf[kPartitionNameBufSize + 16];
    std::memset(buf, 'Z', sizeof buf);
    FormatPartitionName(d, buf);
    EXPECT_EQ(std::string(buf), PartitionName(d)) << d;
    // Nothing written past the documented buffer size.
    for (size_t i = kPartitionNameBufSize; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 'Z') << d;
  }
}

TEST(PartitionCalendar, DayStartLiteralIsIsoUtc) {
  char buf[kPartitionNameBufSize];
  FormatDayStartLiteral(9821, buf);
  EXPECT_STREQ(buf, "2026-11-21 00:00:00+00");
  FormatDayStartLiteral(0, buf);
  EXPECT_STREQ(buf, "2000-01-01 00:00:00+00");
  FormatDayStartLiteral(-1, buf);
  EXPECT_STREQ(buf, "1999-12-31 00:00:00+00");
  FormatDayStartLiteral(DayOfUnixMidnight(kUnix20240229), buf);
  EXPECT_STREQ(buf, "2024-02-29 00:00:00+00");
  FormatDayStartLiteral(DayOfUnixMidnight(kUnix21000301), buf);
  EXPECT_STREQ(buf, "2100-03-01 00:00:00+00");
}

TEST(PartitionCalendar, ParseAcceptsTheWholeFourDigitYearRange) {
  EXPECT_EQ(ParsePartitionName("events_p99991231"), DayFromCivil({9999, 12, 31}));
  EXPECT_EQ(PartitionName(DayFromCivil({9999, 12, 31})), "events_p99991231");
  EXPECT_EQ(ParsePartitionName("events_p00010101"), DayFromCivil({1, 1, 1}));
  EXPECT_EQ(PartitionName(DayFromCivil({1, 1, 1})), "events_p00010101");
}

TEST(PartitionCalendar, CivilConversionsAreInverse) {
  for (int64_t d = -800000; d <= 3000000; d += 101) {
    const CivilDate c = CivilFromDay(d);
    ASSERT_GE(c.month, 1u);
    ASSERT_LE(c.month, 12u);
    ASSERT_GE(c.day, 1u);
    ASSERT_LE(c.day, 31u);
    ASSERT_EQ(DayFromCivil(c), d) << c.year << "-" << c.month << "-" << c.day;
  }
}

TEST(PartitionCalendar, ParseRejectsNamesThatAreNotOurs) {
  for (const char *bad : {
           "events_p20260231",   // February 31st
           "events_p20260230",   // February 30th
           "events_p20260431",   // April has 30 days
           "events_p20261131",   // November has 30 days
           "events_p2026112",    // too short
           "events_p202611211",  // too long
           "events_p20261121 ",  // trailing space
           " events_p20261121",  // leading space
           "events_x20261121",   // wrong prefix
           "Events_p20261121",   // prefix is case-sensitive
           "events20261121",     // prefix without _p
           "eventsp_20261121",   // shuffled prefix
           "events_p2026112a",   // not a digit
           "events_p2026112/",   // the byte before '0'
           "events_p2026112:",   // the byte after '9'
           "events_p20261:21",   // the byte after '9'
           "events_p+0261121",   // sign
           "events_p-0261121",   // sign
           "events_p2026-11-",   // dashes
           "events_p20261321",   // month 13
           "events_p20260021",   // month 0
           "events_p20261100",   // day 0
           "events_p20261132",   // day 32
           "events_p00000000",   // all zeros
           "events_p",           // no date
           "",                   // empty
           "orders",             // unrelated table
       }) {
    EXPECT_EQ(ParsePartitionName(bad), std::nullopt) << '"' << bad << '"';
  }
  EXPECT_EQ(ParsePartitionName(std::string("events_p2026112\0", 16)), std::nullopt);
}

TEST(PartitionCalendar, ParseReadsNameFromStringViewBoundsOnly) {
  // The name is a prefix of a longer buffer: only the view counts.
  const std::string buffer = "events_p20261121_default";
  EXPECT_EQ(ParsePartitionName(std::string_view(buffer).substr(0, 16)), 9821);
  EXPECT_EQ(ParsePartitionName(buffer), std::nullopt);
}

}  // namespace
}  // namespace outbox
