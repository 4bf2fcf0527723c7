#include "core/partition_calendar.hpp"

#include <cstdio>

namespace outbox {

namespace {
// Days from 1970-01-01 to 2000-01-01.
constexpr int64_t kPgEpochUnixDays = kPgEpochUnixSeconds / 86400;
constexpr std::string_view kPrefix = "events_p";

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
}  // namespace

int64_t DayOf(int64_t pg_timestamp_us) { return FloorDiv(pg_timestamp_us, kUsecPerDay); }

int64_t DayStart(int64_t day) { return day * kUsecPerDay; }

CivilDate CivilFromDay(int64_t day) {
  int64_t z = day + kPgEpochUnixDays + 719468;
  const int64_t era = FloorDiv(z, 146097);
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const int64_t y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  return CivilDate{static_cast<int>(y), static_cast<unsigned>(m), static_cast<unsigned>(d)};
}

int64_t DayFromCivil(CivilDate date) {
  const int64_t y = static_cast<int64_t>(date.year) - (date.month <= 2 ? 1 : 0);
  const int64_t era = FloorDiv(y, 400);
  const int64_t yoe = y - era * 400;
  const int64_t mp = date.month > 2 ? date.month - 3 : date.month + 9;
  const int64_t doy = (153 * mp + 2) / 5 + date.day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468 - kPgEpochUnixDays;
}

void FormatPartitionName(int64_t day, char *buf) {
  const CivilDate c = CivilFromDay(day);
  std::snprintf(buf, kPartitionNameBufSize, "events_p%04d%02u%02u", c.year, c.month, c.day);
}

std::string PartitionName(int64_t day) {
  char buf[kPartitionNameBufSize];
  FormatPartitionName(day, buf);
  return buf;
}

void FormatDayStartLiteral(int64_t day, char *buf) {
  const CivilDate c = CivilFromDay(day);
  std::snprintf(buf, kPartitionNameBufSize, "%04d-%02u-%02u 00:00:00+00", c.year, c.month, c.day);
}

std::optional<int64_t> ParsePartitionName(std::string_view name) {
  if (name.size() != kPrefix.size() + 8 || name.substr(0, kPrefix.size()) != kPrefix) {
    return std::nullopt;
  }
  int digits[8];
  for (size_t i = 0; i < 8; ++i) {
    const char c = name[kPrefix.size() + i];
    if (c < '0' || c > '9') return std::nullopt;
    digits[i] = c - '0';
  }
  CivilDate date{};
  date.year = digits[0] * 1000 + digits[1] * 100 + digits[2] * 10 + digits[3];
  date.month = static_cast<unsigned>(digits[4] * 10 + digits[5]);
  date.day = static_cast<unsigned>(digits[6] * 10 + digits[7]);
  if (date.month < 1 || date.month > 12 || date.day < 1 || date.day > 31) return std::nullopt;
  const int64_t day = DayFromCivil(date);
  // Reject dates such as 20260231 that normalise to another day.
  const CivilDate back = CivilFromDay(day);
  if (back.year != date.year || back.month != date.month || back.day != date.day) {
    return std::nullopt;
  }
  return day;
}

}  // namespace outbox
