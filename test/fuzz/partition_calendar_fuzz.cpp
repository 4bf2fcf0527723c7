// Fuzz target: partition day arithmetic agrees with the C library's calendar,
// partition names round-trip, and ParsePartitionName accepts exactly
// "events_p" + a real YYYYMMDD date.
//
// Input: the whole input is tried as a partition name; its first 8 bytes are
// also read as a timestamptz (folded into PostgreSQL's finite range, which is
// all maintain() can be handed once infinities are set aside) and its 9th and
// 10th bytes as a premake offset of 0..365 days.
#include "core/partition_calendar.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

namespace {

using namespace outbox;

// PostgreSQL's MIN_TIMESTAMP (4714-11-24 BC) and END_TIMESTAMP (294277-01-01).
constexpr int64_t kMinTimestamp = -211813488000000000LL;
constexpr int64_t kEndTimestamp = 9223371331200000000LL;

[[noreturn]] void Fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "invariant failed: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

// The civil date of a day, from glibc's gmtime_r (64-bit time_t).
CivilDate RefCivil(int64_t day) {
  const time_t t = static_cast<time_t>((day + kPgEpochUnixSeconds / 86400) * 86400);
  struct tm tm;
  if (gmtime_r(&t, &tm) == nullptr) Fail("gmtime_r failed", std::to_string(day));
  return CivilDate{tm.tm_year + 1900, static_cast<unsigned>(tm.tm_mon + 1),
                   static_cast<unsigned>(tm.tm_mday)};
}

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

unsigned DaysInMonth(int64_t y, unsigned m) {
  static const unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

void ProveDayArithmetic(int64_t ts, unsigned premake) {
  const int64_t day = DayOf(ts);
  const std::string at = std::to_string(ts);
  if (!(DayStart(day) <= ts && ts < DayEnd(day))) Fail("timestamp outside its own day", at);
  if (DayEnd(day) - DayStart(day) != kUsecPerDay) Fail("a day is not 86400 s", at);
  if (DayOf(DayStart(day)) != day || DayOf(DayStart(day) - 1) != day - 1) {
    Fail("DayOf/DayStart do not invert", at);
  }

  // maintain() names partitions from today up to today + premake. Those days
  // may lie past PostgreSQL's last timestamp, so no DayStart() on them: only
  // names and literals are made for them, and DayStart() of a day that far
  // out would overflow int64.
  const int64_t d = day + premake;
  const CivilDate c = CivilFromDay(d), ref = RefCivil(d);
  const std::string dd = std::to_string(d);
  if (c.year != ref.year || c.month != ref.month || c.day != ref.day) {
    Fail("CivilFromDay disagrees with gmtime_r", dd);
  }
  if (DayFromCivil(c) != d) Fail("DayFromCivil(CivilFromDay(d)) != d", dd);

  char want[64];
  std::snprintf(want, sizeof want, "events_p%04d%02u%02u", c.year, c.month, c.day);
  char buf[kPartitionNameBufSize];
  FormatPartitionName(d, buf);
  if (std::strcmp(buf, want) != 0 || PartitionName(d) != want) Fail("wrong partition name", want);
  // Only four-digit years have names ParsePartitionName can read back.
  const std::optional<int64_t> back = ParsePartitionName(want);
  if (c.year >= 0 && c.year <= 9999 ? back != d : back.has_value()) {
    Fail("partition name does not round-trip", want);
  }

  FormatDayStartLiteral(d, buf);
  int y = 0;
  unsigned m = 0, md = 0;
  char rest[32] = "";
  if (std::sscanf(buf, "%d-%u-%u %31[^\n]", &y, &m, &md, rest) != 4 || y != c.year ||
      m != c.month || md != c.day || std::strcmp(rest, "00:00:00+00") != 0) {
    Fail("day start literal does not read back", buf);
  }
}

void ProveNameParsing(std::string_view name) {
  const std::optional<int64_t> got = ParsePartitionName(name);
  bool ok = name.size() == 16 && name.substr(0, 8) == "events_p";
  for (size_t i = 8; ok && i < 16; ++i) ok = name[i] >= '0' && name[i] <= '9';
  int64_t y = 0;
  unsigned m = 0, d = 0;
  if (ok) {
    y = std::stoi(std::string(name.substr(8, 4)));
    m = static_cast<unsigned>(std::stoi(std::string(name.substr(12, 2))));
    d = static_cast<unsigned>(std::stoi(std::string(name.substr(14, 2))));
    ok = m >= 1 && m <= 12 && d >= 1 && d <= DaysInMonth(y, m);
  }
  const std::string shown(name.substr(0, 64));
  if (ok != got.has_value()) Fail(ok ? "rejected a real date" : "accepted a non-name", shown);
  if (!ok) return;
  const CivilDate c = RefCivil(*got);
  if (c.year != y || c.month != m || c.day != d) Fail("parsed to another day", shown);
  if (PartitionName(*got) != name) Fail("parsed name does not format back", shown);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ProveNameParsing(std::string_view(reinterpret_cast<const char *>(data), size));
  if (size >= 10) {
    uint64_t raw;
    std::memcpy(&raw, data, sizeof raw);
    // DayOf must be defined for every int64, infinities included.
    (void)DayOf(static_cast<int64_t>(raw));
    // Unsigned arithmetic: the range is wider than INT64_MAX.
    const uint64_t span =
        static_cast<uint64_t>(kEndTimestamp) - static_cast<uint64_t>(kMinTimestamp);
    const int64_t ts = static_cast<int64_t>(static_cast<uint64_t>(kMinTimestamp) + raw % span);
    ProveDayArithmetic(ts, (data[8] | (data[9] << 8)) % 366);
  }
  return 0;
}
