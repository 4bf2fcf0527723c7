// The fault injection rules the test builds read from outbox.fault_injection:
// what parses, which rule decides, probabilities and limits.
#include "core/fault_points.hpp"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

namespace outbox {
namespace fault {
namespace {

class FaultPointsTest : public ::testing::Test {
 protected:
  void TearDown() override { Configure(""); }
};

TEST_F(FaultPointsTest, ValidRulesParse) {
  std::string error;
  EXPECT_TRUE(Validate("", &error));
  EXPECT_TRUE(Validate("publisher.after_begin=error", &error)) << error;
  EXPECT_TRUE(Validate(" publisher.*=cancel/20 , dispatch.*=exception/50#3,*=none", &error))
      << error;
  EXPECT_TRUE(Validate("launcher.scan=terminate#1, a=sigkill, b=oom", &error)) << error;
  EXPECT_TRUE(Validate("c=stall, d=latch#1", &error)) << error;
  Configure("d=latch#1");
  EXPECT_EQ(Decide("d"), Action::kLatch);
  EXPECT_STREQ(ActionName(Action::kLatch), "latch");
}

TEST_F(FaultPointsTest, BadRulesAreRefusedWithAReason) {
  const char *bad[] = {"publisher", "x=explode", "x=error/0", "x=error/abc", "x=error#",
                       "X=error",   "a*b=error", "=error",    "x;y=error",   "x=error/1234567890"};
  for (const char *spec : bad) {
    std::string error;
    EXPECT_FALSE(Validate(spec, &error)) << spec;
    EXPECT_FALSE(error.empty()) << spec;
  }
  std::string many;
  for (int i = 0; i < 17; ++i) many += "p" + std::to_string(i) + "=error,";
  std::string error;
  EXPECT_FALSE(Validate(many, &error));
}

TEST_F(FaultPointsTest, TheFirstMatchingRuleDecides) {
  Configure("publisher.after_begin=cancel, publisher.*=error, *=oom");
  EXPECT_EQ(Decide("publisher.after_begin"), Action::kCancel);
  EXPECT_EQ(Decide("publisher.after_claim"), Action::kError);
  EXPECT_EQ(Decide("launcher.scan"), Action::kOom);
  Configure("publisher.after_begin=error");
  EXPECT_EQ(Decide("publisher.after_beginning"), Action::kNone) << "exact names match exactly";
  EXPECT_EQ(Decide("publisher.after"), Action::kNone);
}

TEST_F(FaultPointsTest, NoRulesMeansNoFaults) {
  Configure("");
  EXPECT_EQ(Decide("publisher.after_begin"), Action::kNone);
  EXPECT_NO_THROW(HitCpp("dispatch.begin"));
}

TEST_F(FaultPointsTest, ALimitStopsFiring) {
  Configure("x=error#2");
  EXPECT_EQ(Decide("x"), Action::kError);
  EXPECT_EQ(Decide("x"), Action::kError);
  EXPECT_EQ(Decide("x"), Action::kNone);
  EXPECT_EQ(Decide("x"), Action::kNone);
}

TEST_F(FaultPointsTest, AProbabilityFiresAboutThatOften) {
  Configure("x=error/10");
  int fired = 0;
  for (int i = 0; i < 10000; ++i) fired += Decide("x") == Action::kError ? 1 : 0;
  EXPECT_GT(fired, 800);
  EXPECT_LT(fired, 1200);
}

TEST_F(FaultPointsTest, CppPointsThrowOnlyWhatCppCodeCanThrow) {
  Configure("a=exception, b=oom, c=error, d=cancel");
  EXPECT_THROW(HitCpp("a"), std::runtime_error);
  EXPECT_THROW(HitCpp("b"), std::bad_alloc);
  EXPECT_NO_THROW(HitCpp("c"));
  EXPECT_NO_THROW(HitCpp("d"));
}

TEST_F(FaultPointsTest, InvalidRulesAreSkippedWhenConfiguredAnyway) {
  Configure("bad, x=error, y=explode");
  EXPECT_EQ(Decide("x"), Action::kError);
  EXPECT_EQ(Decide("y"), Action::kNone);
}

}  // namespace
}  // namespace fault
}  // namespace outbox
