// W3C trace context values that emit() accepts from outbox.traceparent and
// outbox.tracestate.
#include "core/trace_context.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox {
namespace {

const std::string kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(Traceparent, AcceptsTheSpecsExample) { EXPECT_TRUE(IsValidTraceparent(kValid)); }

TEST(Traceparent, RejectsWrongLengthsAndSeparators) {
  EXPECT_FALSE(IsValidTraceparent(""));
  EXPECT_FALSE(IsValidTraceparent(kValid.substr(0, 54)));
  EXPECT_FALSE(IsValidTraceparent(kValid + "-extra"));  // version 00 has no extension
  std::string v = kValid;
  v[2] = '_';
  EXPECT_FALSE(IsValidTraceparent(v));
  v = kValid;
  v[52] = '.';
  EXPECT_FALSE(IsValidTraceparent(v));
}

TEST(Traceparent, RejectsUpperCaseAndNonHex) {
  std::string v = kValid;
  v[3] = 'A';
  EXPECT_FALSE(IsValidTraceparent(v));
  v = kValid;
  v[40] = 'g';
  EXPECT_FALSE(IsValidTraceparent(v));
}

TEST(Traceparent, RejectsAllZeroIdsAndVersionFF) {
  EXPECT_FALSE(IsValidTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
  EXPECT_FALSE(IsValidTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
  EXPECT_FALSE(IsValidTraceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
}

TEST(Traceparent, FutureVersionsMayExtendAfterADash) {
  const std::string v1 = "01" + kValid.substr(2);
  EXPECT_TRUE(IsValidTraceparent(v1));
  EXPECT_TRUE(IsValidTraceparent(v1 + "-future"));
  EXPECT_FALSE(IsValidTraceparent(v1 + "future"));
}

// Red team: a future-version traceparent of 150 MB of control characters
// was accepted and grew sixfold as JSON text in the publisher.
TEST(Traceparent, FutureVersionExtensionsAreBoundedPrintableAscii) {
  const std::string base = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-";
  const std::string at_limit = base + std::string(kMaxTraceparentLength - base.size(), 'x');
  EXPECT_TRUE(IsValidTraceparent(at_limit));
  EXPECT_FALSE(IsValidTraceparent(at_limit + "x"));
  EXPECT_FALSE(IsValidTraceparent(base + std::string(10, '\x01')));
  EXPECT_FALSE(IsValidTraceparent(base + "a b"));
}

TEST(Tracestate, AcceptsPrintableAsciiUpTo512) {
  EXPECT_TRUE(IsValidTracestate(""));
  EXPECT_TRUE(IsValidTracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
  EXPECT_TRUE(IsValidTracestate(std::string(512, 'a')));
  EXPECT_FALSE(IsValidTracestate(std::string(513, 'a')));
  EXPECT_FALSE(IsValidTracestate("a=b\n"));
  EXPECT_FALSE(IsValidTracestate("a=\xc3\xa9"));
}

}  // namespace
}  // namespace outbox
