// Suspects on their own: which events lost with a connection are sent alone,
// how their failures alone are counted, whose turn it is on a sink, and the
// bound on what is remembered.
#include "core/suspects.hpp"
#include "dispatch_support.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace outbox {
namespace {

using test_support::Id;

TEST(SuspectsTest, AnEventLostWithOthersTwiceOnTheSameSinkIsSentAlone) {
  Suspects s;
  EXPECT_FALSE(s.LostWithOthers(Id(1), "mq"));
  EXPECT_FALSE(s.SendsAlone(Id(1), "mq"));
  EXPECT_TRUE(s.LostWithOthers(Id(1), "mq"));
  EXPECT_TRUE(s.SendsAlone(Id(1), "mq"));
  EXPECT_FALSE(s.SendsAlone(Id(1), "other")) << "another sink knows nothing of it";
  EXPECT_FALSE(s.SendsAlone(Id(2), "mq"));
}

TEST(SuspectsTest, ARouteToAnotherSinkStartsTheEventAfresh) {
  Suspects s;
  s.LostWithOthers(Id(1), "mq");
  s.LostWithOthers(Id(1), "mq");
  EXPECT_FALSE(s.LostWithOthers(Id(1), "nats"));
  EXPECT_FALSE(s.SendsAlone(Id(1), "nats"));
  EXPECT_FALSE(s.SendsAlone(Id(1), "mq"));
  EXPECT_TRUE(s.LostWithOthers(Id(1), "nats"));
}

TEST(SuspectsTest, FailuresAloneAreCountedInARowUntilForgotten) {
  Suspects s;
  s.LostWithOthers(Id(1), "mq");
  s.LostWithOthers(Id(1), "mq");
  EXPECT_EQ(s.FailedAlone(Id(1)), 1);
  EXPECT_EQ(s.FailedAlone(Id(1)), 2);
  s.Forget(Id(1));
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.FailedAlone(Id(1)), 1) << "unknown: as if for the first time";
  s.Forget(Id(9));  // unknown: nothing
}

TEST(SuspectsTest, OneEventPerSinkIsOutAloneUntilItIsJudgedOrItsTurnRunsOut) {
  Suspects s;
  const int64_t now = 1000;
  uint64_t ticket = 0;
  EXPECT_FALSE(s.Out("mq", now, &ticket));
  s.SentAlone("mq", Id(1), 42, now);
  ASSERT_TRUE(s.Out("mq", now, &ticket));
  EXPECT_EQ(ticket, 42u);
  EXPECT_FALSE(s.Out("nats", now, &ticket)) << "other sinks have their own turn";
  s.Judged("mq", Id(2), now);  // not the one out: nothing
  EXPECT_TRUE(s.Out("mq", now, &ticket));
  EXPECT_FALSE(s.Out("mq", now + Suspects::kTurnMs, &ticket)) << "never judged: the turn ends";
  EXPECT_EQ(s.TurnSpacingMs("mq"), Suspects::kMinTurnSpacingMs);
  s.Judged("mq", Id(1), now + 250);
  EXPECT_EQ(s.TurnSpacingMs("mq"), 250) << "the turn's length";
  EXPECT_EQ(s.TurnSpacingMs("nats"), Suspects::kMinTurnSpacingMs);
  EXPECT_FALSE(s.Out("mq", now, &ticket));
  s.SentAlone("mq", Id(3), 43, now);
  s.ClearTurns();
  EXPECT_FALSE(s.Out("mq", now, &ticket));
}

void MakeAlone(Suspects *s, int id, const char *sink) {
  s->LostWithOthers(Id(id), sink);
  s->LostWithOthers(Id(id), sink);
}

TEST(SuspectsTest, LossesAloneWithNothingElseAnsweredTellTheBrokerFromTheMessage) {
  Suspects s;
  for (int id : {1, 2, 3}) MakeAlone(&s, id, "mq");
  MakeAlone(&s, 4, "nats");
  EXPECT_EQ(s.UntriedAlone("mq"), 3u);
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1))) << "the first: the message's";
  EXPECT_TRUE(s.TriedAlone("mq", Id(1)));
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1))) << "the only one tried, again: the message's";
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2))) << "another, not tried yet: its own";
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(3))) << "a burst of culprits: each its own";
  EXPECT_EQ(s.UntriedAlone("mq"), 0u);
  EXPECT_TRUE(s.LostAloneUnanswered("mq", Id(1))) << "tried already, and others too: the broker's";
  EXPECT_TRUE(s.LostAloneUnanswered("mq", Id(2)));
  EXPECT_FALSE(s.LostAloneUnanswered("nats", Id(4))) << "each sink has its own series";
  EXPECT_EQ(s.UntriedAlone("nats"), 0u);
  s.SinkAnswered("mq");
  EXPECT_FALSE(s.TriedAlone("mq", Id(1)));
  EXPECT_EQ(s.UntriedAlone("mq"), 3u) << "an answer ends the series";
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2)));
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(9))) << "not a suspect sent alone: not kept";
  EXPECT_FALSE(s.TriedAlone("mq", Id(9)));
  s.SinkAnswered("other");  // nothing noted: nothing
}

TEST(SuspectsTest, AForgottenOrMovedSuspectIsNeitherTriedNorWaiting) {
  Suspects s;
  for (int id : {1, 2, 3}) MakeAlone(&s, id, "mq");
  s.LostAloneUnanswered("mq", Id(1));
  s.LostAloneUnanswered("mq", Id(2));
  EXPECT_EQ(s.UntriedAlone("mq"), 1u);
  s.Forget(Id(1));
  EXPECT_FALSE(s.TriedAlone("mq", Id(1)));
  EXPECT_EQ(s.UntriedAlone("mq"), 1u);
  s.LostWithOthers(Id(2), "nats");  // its route moved to another sink
  EXPECT_FALSE(s.TriedAlone("mq", Id(2)));
  EXPECT_EQ(s.UntriedAlone("mq"), 1u);
  EXPECT_EQ(s.UntriedAlone("nats"), 0u) << "not alone there yet";
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(3)));
  EXPECT_TRUE(s.LostAloneUnanswered("mq", Id(3))) << "those that left still count as tried";
  s.Forget(Id(3));
  EXPECT_EQ(s.UntriedAlone("mq"), 0u);
}

TEST(SuspectsTest, ATriedEventThatEndedStillCountsUntilTheSinkAnswers) {
  // A broker that closes every connection and one key's events, sent alone
  // one after the other: the first ends dead, and the next one lost twice
  // is the broker's, not the event's.
  Suspects s;
  for (int id : {1, 2}) MakeAlone(&s, id, "mq");
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1)));
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1))) << "the only one tried";
  s.Forget(Id(1));  // dead
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2))) << "not tried yet: its own";
  EXPECT_TRUE(s.LostAloneUnanswered("mq", Id(2))) << "after another: the broker's";
  s.SinkAnswered("mq");
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2)));
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2))) << "an answer forgets the ended one too";
}

TEST(SuspectsTest, WhoWasTriedIsForgottenAfterTheRenewalTime) {
  // Culprits heading the only keys of a quiet sink: each is tried once
  // more per renewal time, instead of the sink staying down for good.
  Suspects s;
  for (int id : {1, 2}) MakeAlone(&s, id, "mq");
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1), 1000, 500));
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2), 1100, 500));
  EXPECT_TRUE(s.LostAloneUnanswered("mq", Id(1), 1400, 500)) << "within it: the broker's";
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1), 1500, 500)) << "past it: its own again";
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2), 1600, 500));
  EXPECT_TRUE(s.LostAloneUnanswered("mq", Id(2), 1700, 500));
  EXPECT_TRUE(s.LostAloneUnanswered("mq", Id(1), 1999, 500));
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1), 2000, 500));
}

TEST(SuspectsTest, ATriedEventWaitsForUntriedOnesOnlyUntilTheRenewalTime) {
  Suspects s;
  for (int id : {1, 2}) MakeAlone(&s, id, "mq");
  EXPECT_FALSE(s.WaitsForUntried("mq", Id(1), 1000, 500)) << "not tried yet";
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(1), 1000, 500));
  EXPECT_TRUE(s.WaitsForUntried("mq", Id(1), 1000, 500)) << "2 is untried";
  EXPECT_FALSE(s.WaitsForUntried("mq", Id(2), 1000, 500)) << "2 itself goes";
  EXPECT_TRUE(s.WaitsForUntried("mq", Id(1), 1499, 500));
  EXPECT_FALSE(s.WaitsForUntried("mq", Id(1), 1500, 500))
      << "2 never came (its route paused, say): 1 goes once who was tried is forgotten";
  EXPECT_TRUE(s.WaitsForUntried("mq", Id(1), 1000000, 0)) << "no renewal time: until 2 is tried";
  EXPECT_EQ(s.TriedUntilMs("mq", 500), 1500);
  EXPECT_EQ(s.TriedUntilMs("mq", 0), 0);
  EXPECT_EQ(s.TriedUntilMs("other", 500), 0);
  EXPECT_FALSE(s.LostAloneUnanswered("mq", Id(2), 1100, 500));
  EXPECT_FALSE(s.WaitsForUntried("mq", Id(1), 1100, 500)) << "every one tried: 1 goes again";
  s.SinkAnswered("mq");
  EXPECT_FALSE(s.WaitsForUntried("mq", Id(1), 1100, 500)) << "an answer forgets who was tried";
}

TEST(SuspectsTest, PastItsBoundTheOldestEventsAreForgottenFirst) {
  Suspects s;
  for (size_t n = 1; n <= Suspects::kMaxSuspects + 2; ++n) {
    s.LostWithOthers(Id(static_cast<int>(n)), "mq");
    s.LostWithOthers(Id(static_cast<int>(n)), "mq");
  }
  EXPECT_EQ(s.size(), Suspects::kMaxSuspects);
  EXPECT_EQ(s.UntriedAlone("mq"), Suspects::kMaxSuspects) << "the forgotten are not counted";
  EXPECT_FALSE(s.SendsAlone(Id(1), "mq"));
  EXPECT_FALSE(s.SendsAlone(Id(2), "mq"));
  EXPECT_TRUE(s.SendsAlone(Id(3), "mq"));
  EXPECT_TRUE(s.SendsAlone(Id(static_cast<int>(Suspects::kMaxSuspects) + 2), "mq"));
}

}  // namespace
}  // namespace outbox
