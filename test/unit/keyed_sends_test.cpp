// The open-Send bookkeeping of the MQTT and NATS sinks (keyed_sends.hpp),
// alone: copies that outlive the caller's views, each key's chain within a
// Send, several Sends open and done independently, wire ids, deadlines,
// the cut-off, a lost connection, and abandoned Sends whose arrays nothing
// writes into afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "sinks/keyed_sends.hpp"

namespace outbox {
namespace {

using Clock = KeyedSends::Clock;
using std::chrono::milliseconds;

// Messages whose views point into strings the test keeps (and changes).
struct Messages {
  std::vector<std::string> targets, keys, payloads;
  std::vector<bool> keyed;
  std::vector<int> routes;
  std::vector<Header> headers;
  std::string header_name = "trace", header_value = "abc";

  Messages &Add(std::string target, std::optional<std::string> key, std::string payload,
                int route = 0) {
    targets.push_back(std::move(target));
    routes.push_back(route);
    keyed.push_back(key.has_value());
    keys.push_back(key.value_or(""));
    payloads.push_back(std::move(payload));
    return *this;
  }
  std::vector<OutMessage> Views() {
    headers = {Header{header_name, header_value}};
    std::vector<OutMessage> views;
    for (size_t i = 0; i < targets.size(); ++i) {
      OutMessage m;
      m.id = payloads[i];
      m.target = targets[i];
      m.route = routes[i];
      m.has_key = keyed[i];
      m.key = keys[i];
      m.payload = payloads[i];
      m.headers = headers.data();
      m.header_count = headers.size();
      views.push_back(m);
    }
    return views;
  }
};

std::vector<SendRef> AllReady(KeyedSends *sends) {
  std::vector<SendRef> refs;
  SendRef ref;
  while (sends->NextReady(&ref)) refs.push_back(ref);
  return refs;
}

const Clock::time_point kLater = Clock::now() + std::chrono::hours(1);

// What a sink's send loop does: each message that may go is put on the
// wire (under the next id) before the next is asked for.
std::vector<SendRef> SendAllReady(KeyedSends *sends, uint64_t *wire) {
  std::vector<SendRef> refs;
  SendRef ref;
  while (sends->NextReady(&ref)) {
    if (!sends->MarkSent(ref, ++*wire, kLater)) break;
    refs.push_back(ref);
  }
  return refs;
}

// One Send open over the messages of `m`; `sends` and `out` as the tests
// name them.
struct Opened {
  std::vector<OutMessage> views;
  std::vector<Delivery> out;
  KeyedSends sends;
  uint64_t ticket = 0;
  explicit Opened(Messages *m, Clock::time_point send_until = kLater)
      : views(m->Views()), out(views.size()) {
    ticket = sends.Open(views.data(), views.size(), out.data(), send_until);
  }
};

TEST(KeyedSends, CopiesOutliveTheCallersViews) {
  Messages m;
  m.Add("t/a", "k", "payload-one");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  const uint64_t ticket = o.ticket;
  m.targets[0].assign("XXXXXXXX");
  m.payloads[0].assign("overwritten by the caller");
  m.header_value.assign("zzz");
  o.views.clear();
  const OutMessage &copy = sends.Message(SendRef{ticket, 0});
  EXPECT_EQ(copy.target, "t/a");
  EXPECT_EQ(copy.key, "k");
  EXPECT_EQ(copy.payload, "payload-one");
  ASSERT_EQ(copy.header_count, 1u);
  EXPECT_EQ(copy.headers[0].name, "trace");
  EXPECT_EQ(copy.headers[0].value, "abc");
}

TEST(KeyedSends, AKeysNextMessageWaitsForTheOneBeforeIt) {
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "j", "2").Add("t/a", "k", "3").Add("t/a", std::nullopt, "4");
  m.Add("t/b", "k", "5");  // another target, the same key: the same chain
  Opened o(&m);
  KeyedSends &sends = o.sends;
  std::vector<Delivery> &out = o.out;
  const uint64_t ticket = o.ticket;
  std::vector<SendRef> ready = AllReady(&sends);
  ASSERT_EQ(ready.size(), 3u);  // 1, 2, 4: not 3 nor 5, behind 1
  EXPECT_EQ(ready[0].index, 0u);
  EXPECT_EQ(ready[1].index, 1u);
  EXPECT_EQ(ready[2].index, 3u);
  for (size_t i = 0; i < ready.size(); ++i) ASSERT_TRUE(sends.MarkSent(ready[i], 10 + i, kLater));
  EXPECT_EQ(sends.in_flight(), 3u);
  sends.Settle(SendRef{ticket, 0}, DeliveryStatus::kDelivered, "", true);
  ready = AllReady(&sends);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].index, 2u);  // now, and only now
  EXPECT_EQ(out[0].status, DeliveryStatus::kDelivered);
  EXPECT_GT(out[0].answered_at_us, 0);
  EXPECT_FALSE(sends.Done(ticket));
  ASSERT_TRUE(sends.MarkSent(ready[0], 20, kLater));
  sends.Settle(SendRef{ticket, 2}, DeliveryStatus::kDelivered, "", true);
  ready = AllReady(&sends);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].index, 4u);  // the key's message to the other target
}

TEST(KeyedSends, TheSameKeyOnTwoRoutesIsTwoChains) {
  // Order is promised per route and key: another route's message of the
  // key is not held back behind this route's failure.
  Messages m;
  m.Add("t/a", "k", "1").Add("t/b", "k", "2", /*route=*/1);
  Opened o(&m);
  KeyedSends &sends = o.sends;
  std::vector<Delivery> &out = o.out;
  const uint64_t ticket = o.ticket;
  const std::vector<SendRef> ready = AllReady(&sends);
  ASSERT_EQ(ready.size(), 2u);  // both at once
  for (const SendRef &ref : ready) ASSERT_TRUE(sends.MarkSent(ref, ref.index, kLater));
  sends.Settle(SendRef{ticket, 0}, DeliveryStatus::kRejected, "refused", true);
  sends.Settle(SendRef{ticket, 1}, DeliveryStatus::kDelivered, "", true);
  EXPECT_EQ(out[1].status, DeliveryStatus::kDelivered);
  EXPECT_TRUE(sends.Done(ticket));
}

TEST(KeyedSends, AKeysFailureOnOneTargetHoldsBackItsMessagesToOthers) {
  // A route without a target sends a key's events to several topics: the
  // event on t/b must not be taken while the earlier one on t/a failed.
  Messages m;
  m.Add("t/a", "k", "1").Add("t/b", "k", "2").Add("t/b", "j", "3");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  std::vector<Delivery> &out = o.out;
  const uint64_t ticket = o.ticket;
  for (const SendRef &ref : AllReady(&sends)) ASSERT_TRUE(sends.MarkSent(ref, ref.index, kLater));
  sends.Settle(SendRef{ticket, 0}, DeliveryStatus::kRejected, "refused", true);
  EXPECT_EQ(out[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(out[1].error, KeyedSends::kHeldBack);
  sends.Settle(SendRef{ticket, 2}, DeliveryStatus::kDelivered, "", true);
  EXPECT_TRUE(sends.Done(ticket));
}

TEST(KeyedSends, AFailureHoldsBackTheRestOfItsKeyOnly) {
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "k", "2").Add("t/a", "k", "3").Add("t/a", "j", "4");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  std::vector<Delivery> &out = o.out;
  const uint64_t ticket = o.ticket;
  for (const SendRef &ref : AllReady(&sends)) ASSERT_TRUE(sends.MarkSent(ref, ref.index, kLater));
  sends.Settle(SendRef{ticket, 0}, DeliveryStatus::kRejected, "refused", true);
  EXPECT_EQ(out[0].status, DeliveryStatus::kRejected);
  EXPECT_EQ(out[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(out[2].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(out[2].error, KeyedSends::kHeldBack);
  EXPECT_TRUE(AllReady(&sends).empty());
  EXPECT_FALSE(sends.Done(ticket));  // key j is still in flight
  sends.Settle(SendRef{ticket, 3}, DeliveryStatus::kDelivered, "", true);
  EXPECT_TRUE(sends.Done(ticket));
}

TEST(KeyedSends, SeveralSendsAreOpenAndDoneIndependently) {
  Messages first, second;
  first.Add("t/a", "k", "1").Add("t/a", "k", "2");
  second.Add("t/a", "j", "3");
  std::vector<OutMessage> v1 = first.Views(), v2 = second.Views();
  std::vector<Delivery> out1(2), out2(1);
  KeyedSends sends;
  const uint64_t t1 = sends.Open(v1.data(), v1.size(), out1.data(), kLater);
  const uint64_t t2 = sends.Open(v2.data(), v2.size(), out2.data(), kLater);
  EXPECT_NE(t1, 0u);
  EXPECT_GT(t2, t1);
  std::vector<SendRef> ready = AllReady(&sends);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].ticket, t1);  // the older Send first
  EXPECT_EQ(ready[1].ticket, t2);
  ASSERT_TRUE(sends.MarkSent(ready[0], 7, kLater));
  ASSERT_TRUE(sends.MarkSent(ready[1], 8, kLater));
  SendRef found;
  ASSERT_TRUE(sends.FindSent(8, &found));
  EXPECT_EQ(found.ticket, t2);
  sends.Settle(found, DeliveryStatus::kDelivered, "", true);
  EXPECT_TRUE(sends.Done(t2));
  EXPECT_FALSE(sends.Done(t1));
  EXPECT_FALSE(sends.FindSent(8, &found));  // answered: its id names nothing now
  sends.Close(t2);
  EXPECT_FALSE(sends.IsOpen(t2));
  EXPECT_TRUE(sends.Done(t2));  // a closed ticket matches nothing
  EXPECT_TRUE(sends.HasOutstanding());
  const uint64_t t3 = sends.Open(v2.data(), v2.size(), out2.data(), kLater);
  EXPECT_GT(t3, t2);  // never reused
}

TEST(KeyedSends, AWireIdNamesOneMessageInFlightAtOnce) {
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "j", "2");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  const uint64_t ticket = o.ticket;
  std::vector<SendRef> ready = AllReady(&sends);
  ASSERT_TRUE(sends.MarkSent(ready[0], 5, kLater));
  EXPECT_FALSE(sends.MarkSent(ready[1], 5, kLater));
  EXPECT_EQ(sends.in_flight(), 1u);
  sends.Unbind(SendRef{ticket, 0});
  SendRef found;
  EXPECT_FALSE(sends.FindSent(5, &found));  // no answer under 5 settles it now
  EXPECT_EQ(sends.in_flight(), 1u);         // but it is still in flight
  EXPECT_TRUE(sends.MarkSent(ready[1], 5, kLater));
}

TEST(KeyedSends, DeadlinesComeFirstSentFirst) {
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "j", "2");
  const Clock::time_point now = Clock::now();
  Opened o(&m);
  KeyedSends &sends = o.sends;
  std::vector<SendRef> ready = AllReady(&sends);
  ASSERT_TRUE(sends.MarkSent(ready[0], 1, now + milliseconds(50)));
  ASSERT_TRUE(sends.MarkSent(ready[1], 2, now + milliseconds(80)));
  EXPECT_LE(sends.MsUntilNextDeadline(now, 100), 51);
  EXPECT_GE(sends.MsUntilNextDeadline(now, 100), 49);
  EXPECT_EQ(sends.MsUntilNextDeadline(now, 10), 10);
  SendRef overdue;
  Clock::time_point deadline;
  EXPECT_FALSE(sends.Overdue(now, &overdue, &deadline));
  ASSERT_TRUE(sends.Overdue(now + milliseconds(60), &overdue, &deadline));
  EXPECT_EQ(overdue.index, 0u);
  sends.Settle(overdue, DeliveryStatus::kRetriable, "no answer", false);
  ASSERT_TRUE(sends.Overdue(now + milliseconds(90), &overdue, &deadline));
  EXPECT_EQ(overdue.index, 1u);
}

TEST(KeyedSends, WhatIsNotSentByTheCutOffWaitsBehindItsKey) {
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "k", "2").Add("t/a", std::nullopt, "3");
  const Clock::time_point now = Clock::now();
  Opened o(&m, now + milliseconds(10));
  KeyedSends &sends = o.sends;
  std::vector<Delivery> &out = o.out;
  const uint64_t ticket = o.ticket;
  SendRef first;
  ASSERT_TRUE(sends.NextReady(&first));
  ASSERT_TRUE(sends.MarkSent(first, 1, kLater));
  sends.CutOff(now, "cut off");  // not yet
  EXPECT_EQ(sends.MsUntilNextDeadline(now, 100), 11);
  sends.CutOff(now + milliseconds(20), "cut off");
  EXPECT_EQ(out[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(out[2].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(out[2].error, "cut off");
  EXPECT_FALSE(sends.Done(ticket));  // the one in flight still waits for its answer
  sends.Settle(first, DeliveryStatus::kDelivered, "", true);
  EXPECT_TRUE(sends.Done(ticket));
  EXPECT_EQ(out[1].status, DeliveryStatus::kNotSent);  // not made ready again
  EXPECT_TRUE(AllReady(&sends).empty());
}

// Two Sends of the same three messages (key k twice, then key j), the
// first Send's first message in flight, when the connection is lost with
// a loss that may be a message's.
struct LostWithOneInFlight {
  Messages m;
  std::vector<Delivery> out1 = std::vector<Delivery>(3), out2 = std::vector<Delivery>(3);
  KeyedSends sends;
  uint64_t t1 = 0, t2 = 0;
  LostWithOneInFlight() {
    m.Add("t/a", "k", "1").Add("t/a", "k", "2").Add("t/a", "j", "3");
    std::vector<OutMessage> views = m.Views();
    t1 = sends.Open(views.data(), views.size(), out1.data(), kLater);
    t2 = sends.Open(views.data(), views.size(), out2.data(), kLater);
    SendRef ref;
    EXPECT_TRUE(sends.NextReady(&ref));  // t1's first
    EXPECT_TRUE(sends.MarkSent(ref, 1, kLater));
    sends.FailOutstanding("gone", KeyedSends::Loss::kMaybeAMessage);
  }
};

TEST(KeyedSends, ALostConnectionSettlesEveryOpenSend) {
  LostWithOneInFlight o;
  EXPECT_TRUE(o.sends.Done(o.t1));
  EXPECT_TRUE(o.sends.Done(o.t2));
  EXPECT_EQ(o.out1[0].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(o.out1[0].error, "gone");
  EXPECT_EQ(o.out1[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(o.sends.in_flight(), 0u);
  EXPECT_FALSE(o.sends.HasOutstanding());
  // The one in flight may be what the broker closed the connection over;
  // the one held back behind its key was not on it.
  EXPECT_TRUE(o.out1[0].connection_lost);
  EXPECT_FALSE(o.out1[1].connection_lost);
}

TEST(KeyedSends, MessagesNeverHandedToALostConnectionWaitWithoutSuspicion) {
  // Ready but not sent when the connection went while another was on it:
  // the loss is that one's or the broker's, never theirs. Suspected, they
  // would be sent alone in turn, each behind the culprit of a burst.
  LostWithOneInFlight o;
  EXPECT_TRUE(o.out1[0].connection_lost);
  EXPECT_FALSE(o.out1[0].unsent);
  for (const Delivery *d : {&o.out1[2], &o.out2[0], &o.out2[2]}) {
    EXPECT_EQ(d->status, DeliveryStatus::kRetriable);
    EXPECT_EQ(d->error, "not sent: gone");
    EXPECT_TRUE(d->connection_lost);  // they wait as the lost ones do
    EXPECT_TRUE(d->unsent);           // suspected of nothing
  }
  EXPECT_EQ(o.out2[1].status, DeliveryStatus::kNotSent);  // behind its key's first
  EXPECT_EQ(o.out2[1].error, KeyedSends::kHeldBack);
}

TEST(KeyedSends, AMessageWhosePublishFailedCarriesTheLossNotTheOnesBehindIt) {
  // The connection failed as a message was handed to it (the broker may
  // have closed it over that message's first bytes), nothing else on it:
  // that message is suspected, the ready ones wait.
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "j", "2").Add("t/a", "i", "3");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  SendRef ref;
  ASSERT_TRUE(sends.NextReady(&ref));
  sends.Settle(ref, DeliveryStatus::kRetriable, "not sent: broken pipe", false);
  sends.MarkLost(ref);
  sends.FailOutstanding("broken pipe", KeyedSends::Loss::kMaybeAMessage);
  EXPECT_TRUE(sends.Done(o.ticket));
  EXPECT_EQ(o.out[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(o.out[0].connection_lost);
  EXPECT_FALSE(o.out[0].unsent);
  for (size_t i : {1u, 2u}) {
    EXPECT_EQ(o.out[i].status, DeliveryStatus::kRetriable);
    EXPECT_TRUE(o.out[i].unsent);
  }
}

TEST(KeyedSends, ALossWithNothingOnTheConnectionIsLaidToTheReadyOnes) {
  // Nothing in flight and nothing marked lost (a connection the broker
  // closes as soon as it is made): the ready ones are all the loss may be
  // laid to, so they are suspected, and sent alone the sink is judged by
  // them. Left kNotSent they would be due at once, again and again.
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "j", "2");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  sends.FailOutstanding("closed", KeyedSends::Loss::kMaybeAMessage);
  for (const Delivery &d : o.out) {
    EXPECT_EQ(d.status, DeliveryStatus::kRetriable);
    EXPECT_EQ(d.error, "not sent: closed");
    EXPECT_TRUE(d.connection_lost);
    EXPECT_FALSE(d.unsent);
  }
  // A MarkLost lays only the loss that follows it.
  Messages m2;
  m2.Add("t/a", "k", "1").Add("t/a", "j", "2");
  Opened o2(&m2);
  SendRef ref;
  ASSERT_TRUE(o2.sends.NextReady(&ref));
  o2.sends.Settle(ref, DeliveryStatus::kRetriable, "not sent: x", false);
  o2.sends.MarkLost(ref);
  o2.sends.FailOutstanding("x", KeyedSends::Loss::kMaybeAMessage);
  std::vector<Delivery> later(1);
  (void)o2.sends.Open(o2.views.data(), 1, later.data(), kLater);
  o2.sends.FailOutstanding("y", KeyedSends::Loss::kMaybeAMessage);
  EXPECT_EQ(later[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(later[0].connection_lost);
  EXPECT_FALSE(later[0].unsent);
}

TEST(KeyedSends, AMessageSentAloneWaitsForWhatIsInFlightAndHoldsWhatComesAfter) {
  // A Send alone (a suspect, Sink::SendAlone) between two ordinary ones:
  // the older one's messages go first and the alone one waits until they
  // are answered; while it is in flight nothing else goes, so a connection
  // lost then was lost over it (or by the broker), never over another.
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "j", "2");
  std::vector<OutMessage> views = m.Views();
  std::vector<Delivery> older(2), alone(1), newer(2);
  KeyedSends sends;
  const uint64_t t1 = sends.Open(views.data(), 2, older.data(), kLater);
  const uint64_t t2 = sends.Open(views.data(), 1, alone.data(), kLater, /*alone=*/true);
  const uint64_t t3 = sends.Open(views.data(), 2, newer.data(), kLater);
  uint64_t wire = 0;
  std::vector<SendRef> ready = SendAllReady(&sends, &wire);
  ASSERT_EQ(ready.size(), 2u) << "the older Send's two; the alone one and the newer wait";
  EXPECT_EQ(ready[0].ticket, t1);
  EXPECT_EQ(ready[1].ticket, t1);
  sends.Settle(ready[0], DeliveryStatus::kDelivered, "", true);
  EXPECT_TRUE(SendAllReady(&sends, &wire).empty()) << "one of the older Send's still in flight";
  sends.Settle(ready[1], DeliveryStatus::kDelivered, "", true);
  ready = SendAllReady(&sends, &wire);
  ASSERT_EQ(ready.size(), 1u) << "now the alone one, and nothing after it";
  EXPECT_EQ(ready[0].ticket, t2);
  EXPECT_TRUE(SendAllReady(&sends, &wire).empty()) << "nothing beside it while it is out";
  sends.Settle(ready[0], DeliveryStatus::kDelivered, "", true);
  ready = SendAllReady(&sends, &wire);
  ASSERT_EQ(ready.size(), 2u) << "the newer Send goes once it is answered";
  EXPECT_EQ(ready[0].ticket, t3);
  EXPECT_TRUE(sends.Done(t2));
}

TEST(KeyedSends, AMessageAloneNotSentYetIsNotLostWithTheConnection) {
  // The connection goes while the alone one still waits for what is in
  // flight: it was never on it, so it is kNotSent, not a loss of its own.
  Messages m;
  m.Add("t/a", "k", "1");
  std::vector<OutMessage> views = m.Views();
  std::vector<Delivery> older(1), alone(1);
  KeyedSends sends;
  (void)sends.Open(views.data(), 1, older.data(), kLater);
  const uint64_t t2 = sends.Open(views.data(), 1, alone.data(), kLater, /*alone=*/true);
  SendRef ref;
  ASSERT_TRUE(sends.NextReady(&ref));
  ASSERT_TRUE(sends.MarkSent(ref, 1, kLater));
  EXPECT_FALSE(sends.NextReady(&ref));
  sends.FailOutstanding("gone", KeyedSends::Loss::kMaybeAMessage);
  EXPECT_TRUE(older[0].connection_lost);
  EXPECT_TRUE(sends.Done(t2));
  EXPECT_EQ(alone[0].status, DeliveryStatus::kNotSent);
  EXPECT_FALSE(alone[0].connection_lost);
  // In flight alone when the connection goes, it is lost with it.
  std::vector<Delivery> again(1);
  (void)sends.Open(views.data(), 1, again.data(), kLater, /*alone=*/true);
  ASSERT_TRUE(sends.NextReady(&ref));
  ASSERT_TRUE(sends.MarkSent(ref, 2, kLater));
  sends.FailOutstanding("gone", KeyedSends::Loss::kMaybeAMessage);
  EXPECT_EQ(again[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(again[0].connection_lost);
}

TEST(KeyedSends, AConnectionGivenUpForSilenceSuspectsNoMessage) {
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "j", "2");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  std::vector<SendRef> ready = AllReady(&sends);
  ASSERT_EQ(ready.size(), 2u);
  ASSERT_TRUE(sends.MarkSent(ready[0], 1, kLater));
  sends.FailOutstanding("no acknowledgement", KeyedSends::Loss::kNotAMessage);
  for (const Delivery &d : o.out) {
    EXPECT_EQ(d.status, DeliveryStatus::kRetriable);
    EXPECT_FALSE(d.connection_lost);  // tried alone, it would only wait again
  }
}

TEST(KeyedSends, AbandonedSendsAreNeverWrittenAgain) {
  Messages m;
  m.Add("t/a", "k", "1").Add("t/a", "k", "2").Add("t/a", "j", "3");
  Opened o(&m);
  KeyedSends &sends = o.sends;
  std::vector<Delivery> &out = o.out;
  const uint64_t ticket = o.ticket;
  std::vector<SendRef> ready = AllReady(&sends);
  ASSERT_EQ(ready.size(), 2u);
  ASSERT_TRUE(sends.MarkSent(ready[0], 1, kLater));
  ASSERT_TRUE(sends.MarkSent(ready[1], 2, kLater));
  sends.Settle(ready[1], DeliveryStatus::kDelivered, "", true);
  EXPECT_EQ(sends.AbandonAll("abandoned"), 1u);  // one was in flight
  EXPECT_EQ(out[0].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(out[0].error, "abandoned");
  EXPECT_EQ(out[1].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(out[2].status, DeliveryStatus::kDelivered);  // its outcome stays
  EXPECT_TRUE(sends.empty());
  const Delivery sentinel{DeliveryStatus::kTargetDown, "sentinel", 42, 0};
  out.assign(3, sentinel);
  SendRef found;
  EXPECT_FALSE(sends.FindSent(1, &found));
  sends.Settle(SendRef{ticket, 0}, DeliveryStatus::kDelivered, "", true);
  sends.FailOutstanding("later", KeyedSends::Loss::kMaybeAMessage);
  sends.CutOff(kLater + std::chrono::hours(1), "later");
  for (const Delivery &d : out) {
    EXPECT_EQ(d.status, DeliveryStatus::kTargetDown);
    EXPECT_EQ(d.error, "sentinel");
  }
}

}  // namespace
}  // namespace outbox
