// Day arithmetic for the daily partitions of outbox.events. PostgreSQL-free.
//
// Times are PostgreSQL timestamptz values: microseconds since 2000-01-01
// 00:00:00 UTC. A partition covers one UTC day [start, start + 1 day) and is
// named events_pYYYYMMDD after that day, so names sort in time order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

constexpr int64_t kUsecPerDay = 86400LL * 1000000LL;
// Seconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
constexpr int64_t kPgEpochUnixSeconds = 946684800LL;

// Day number (days since 2000-01-01, negative before) containing ts.
int64_t DayOf(int64_t pg_timestamp_us);

// First microsecond of a day, and of the day after it.
int64_t DayStart(int64_t day);
inline int64_t DayEnd(int64_t day) { return DayStart(day + 1); }

// "events_p20261121" for the day 2026-11-21.
std::string PartitionName(int64_t day);
// The same into a caller's buffer (at least kPartitionNameBufSize bytes), for
// code that must not hold a std::string across PostgreSQL calls.
constexpr size_t kPartitionNameBufSize = 32;
void FormatPartitionName(int64_t day, char *buf);
// "2026-11-21 00:00:00+00": the day's start as an ISO 8601 timestamptz literal
// that reads the same under every DateStyle and TimeZone.
void FormatDayStartLiteral(int64_t day, char *buf);

// The day a partition name stands for, or nothing if the name is not ours
// (wrong prefix, not a real calendar date, stray characters).
std::optional<int64_t> ParsePartitionName(std::string_view name);

// Proleptic Gregorian calendar conversions (Howard Hinnant's algorithms).
struct CivilDate {
  int year;
  unsigned month;  // 1..12
  unsigned day;    // 1..31
};
CivilDate CivilFromDay(int64_t day);
int64_t DayFromCivil(CivilDate date);

}  // namespace outbox
