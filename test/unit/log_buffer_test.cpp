// The log buffer every sink and the dispatcher keep their lines in until the
// publisher's main thread logs them: bounded, and it says what it dropped.
#include "core/log_buffer.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox {
namespace {

TEST(LogBuffer, TakeReturnsTheLinesInOrderOnce) {
  LogBuffer logs("test log line(s)");
  logs.Add(LogLevel::kInfo, "first");
  logs.Add(LogLevel::kWarning, "second");
  auto lines = logs.Take();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, "first");
  EXPECT_EQ(lines[0].level, LogLevel::kInfo);
  EXPECT_EQ(lines[1].text, "second");
  EXPECT_TRUE(logs.Take().empty());
  EXPECT_TRUE(logs.empty());
}

TEST(LogBuffer, LinesPastTheBoundAreCountedAndSaidOnce) {
  LogBuffer logs("test log line(s)");
  for (size_t i = 0; i < LogBuffer::kMaxLines + 5; ++i) logs.Add(LogLevel::kDebug, "x");
  logs.CountDropped(2);  // lines the caller could not add (another thread's)
  auto lines = logs.Take();
  ASSERT_EQ(lines.size(), LogBuffer::kMaxLines + 1);
  EXPECT_EQ(lines.back().level, LogLevel::kWarning);
  EXPECT_EQ(lines.back().text, "7 test log line(s) dropped");
  EXPECT_TRUE(logs.Take().empty()) << "the dropped count is said once";
}

}  // namespace
}  // namespace outbox
