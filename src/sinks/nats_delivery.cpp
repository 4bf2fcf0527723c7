// The NATS sink's outcomes as answers arrive, KeyedSink's part
// (keyed_sink.hpp): each answer on the inbox is matched to what was sent by
// its reply id and judged (nats_replies.hpp), whichever open Send it
// belongs to; a lost connection and passed deadlines settle what has no
// answer. Runs on the owner's thread only (Step, from CollectFor, Collect
// and Poll).
//
// "No responders" (status 503): nothing on the server listens on the
// message's subject. That is the event's fault only when no stream captures
// the subject; it is the sink's state when JetStream is not ready (a server
// restarting, JetStream disabled, a cluster electing a stream's leader),
// which looks the same from the publish. So the sink asks JetStream itself
// ($JS.API.STREAM.NAMES, filtered by the subject) and decides:
// - JetStream answers that no stream captures the subject: kTargetRefused
//   (an attempt for the event; never a sign that the sink is down);
// - JetStream answers that a stream does: kRetriable (the stream is not
//   ready yet);
// - JetStream's API has no responders either, answers an error, or does not
//   answer in time: kRetriable, and the sink is down (JetStream is not
//   there). Every later "no responders" is then kRetriable at once, until
//   the next Send: without JetStream, every subject has none.
#include "sinks/nats_sink_class.hpp"

#include <nats/nats.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "sinks/nats_replies.hpp"

namespace outbox {

namespace {

constexpr const char *kApiSilent =
    "JetStream is not answering: its API has no responders on this server (JetStream is "
    "disabled, or not ready yet after a restart)";

// The reply id in an inbox subject "<prefix><id>"; 0 when it is not one.
uint64_t ReplyId(std::string_view subject, std::string_view prefix) {
  if (subject.size() <= prefix.size() || subject.substr(0, prefix.size()) != prefix) return 0;
  const std::string_view digits = subject.substr(prefix.size());
  if (digits.size() > 19) return 0;
  uint64_t id = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return 0;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return id;
}

std::string_view Body(natsMsg *msg) {
  const char *data = natsMsg_GetData(msg);
  const int length = natsMsg_GetDataLength(msg);
  if (data == nullptr || length <= 0) return std::string_view();
  return std::string_view(data, static_cast<size_t>(length));
}

// The start of an answer that is not JetStream's, for an error text.
std::string Excerpt(std::string_view body) {
  if (body.empty()) return "(empty)";
  std::string shown;
  for (char c : body.substr(0, 120)) {
    const auto u = static_cast<unsigned char>(c);
    shown.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  if (body.size() > 120) shown += "...";
  return shown;
}

}  // namespace

std::string NatsSink::UpText() const { return "JetStream acknowledges messages again"; }

// A connection for a new Send: the one there is (answers that came so far
// judged first, and what a lost one carried settled), else a new one.
bool NatsSink::Connect(InterruptCheck interrupted, std::string *error) {
  (void)interrupted;  // libnats's first attempt cannot be interrupted
  Step(0);
  api_silent_ = false;  // each Send asks JetStream afresh
  return EnsureConnection(error);
}

void NatsSink::Step(int64_t wait_ms) {
  if (nc_ == nullptr || inbox_ == nullptr) return;  // nothing is outstanding without one
  // A Step may come late: what is past its Send's cut-off is not sent first.
  sends_.CutOff(Clock::now(), CutOffText());
  SendReady();
  inbox_->Take(sends_.MsUntilNextDeadline(Clock::now(), wait_ms), &answers_);
  for (NatsMsgPtr &answer : answers_) Judge(answer.get());
  answers_.clear();
  if (duplicates_ > 0 && !sends_.HasOutstanding()) {  // one line for a burst of Sends
    AddLog(LogLevel::kDebug,
           std::to_string(duplicates_) +
               " message(s) were already in their stream (duplicate Nats-Msg-Id): counted as "
               "delivered, stored once");
    duplicates_ = 0;
  }
  std::string reason;
  if (sends_.HasOutstanding() && ConnectionLost(&reason)) {
    LoseConnection(reason, KeyedSends::Loss::kMaybeAMessage);
    return;
  }
  Expire(Clock::now());
  sends_.CutOff(Clock::now(), CutOffText());
  lookups_.erase(std::remove_if(lookups_.begin(), lookups_.end(),
                                [this](const Lookup &l) { return !sends_.IsOpen(l.ticket); }),
                 lookups_.end());
  SendReady();  // the followers of what was acknowledged
}

void NatsSink::Judge(natsMsg *answer) {
  const char *subject = natsMsg_GetSubject(answer);
  const uint64_t id = ReplyId(subject != nullptr ? subject : "", inbox_prefix_);
  if (id == 0) return;
  last_answer_ = Clock::now();  // the server answered: the connection carries
  for (Lookup &lookup : lookups_) {
    if (lookup.reply == id) {
      JudgeLookup(&lookup, answer);
      return;
    }
  }
  SendRef ref;
  if (sends_.FindSent(id, &ref)) JudgeMessage(ref, answer);  // else a Send gone meanwhile
}

void NatsSink::JudgeMessage(SendRef ref, natsMsg *answer) {
  if (natsMsg_IsNoResponders(answer)) {
    NoResponders(ref);
    return;
  }
  const std::string_view body = Body(answer);
  JetStreamReply reply;
  if (!ParseJetStreamReply(body, &reply) || (!IsPubAck(reply) && !reply.has_error)) {
    // Something else listens on the subject and answered: the message went
    // to it, not to a stream.
    sends_.Settle(ref, DeliveryStatus::kTargetRefused,
                  "the answer on its subject is not JetStream's (no stream captures it, and "
                  "something else answers): " +
                      Excerpt(body),
                  true);
    return;
  }
  if (IsPubAck(reply)) {
    if (reply.duplicate) ++duplicates_;
    NoteUp();
    sends_.Settle(ref, DeliveryStatus::kDelivered, std::string(), true);
    return;
  }
  sends_.Settle(ref, ClassifyJetStreamError(reply.code, reply.err_code, reply.description),
                JetStreamErrorText(reply), true);
}

// Message `ref` had no responders: judged by what JetStream says of its
// subject (see the top of this file).
void NatsSink::NoResponders(SendRef ref) {
  if (api_silent_) {
    sends_.Settle(ref, DeliveryStatus::kRetriable, kApiSilent, false);
    return;
  }
  const std::string_view subject = sends_.Message(ref).target;
  for (Lookup &lookup : lookups_) {
    if (lookup.ticket != ref.ticket || lookup.subject != subject) continue;
    if (lookup.done) {
      sends_.Settle(ref, lookup.status, lookup.error, lookup.answered);
    } else {
      lookup.waiting.push_back(ref);
      sends_.Unbind(ref);
    }
    return;
  }
  SendLookup(ref);
}

void NatsSink::JudgeLookup(Lookup *lookup, natsMsg *answer) {
  if (lookup->done) return;
  lookup->done = true;
  const std::string shown = "\"" + lookup->subject + "\"";  // a valid subject: printable
  JetStreamReply reply;
  if (natsMsg_IsNoResponders(answer)) {
    api_silent_ = true;
    lookup->error = kApiSilent;
    NoteDown(kApiSilent);
  } else if (!ParseJetStreamReply(Body(answer), &reply)) {
    lookup->error =
        "no responders on subject " + shown +
        ", and JetStream's stream lookup answered what is not JSON: " + Excerpt(Body(answer));
  } else if (reply.has_error) {
    lookup->error = "no responders on subject " + shown + ", and JetStream's stream lookup " +
                    "failed: " + reply.description + " (" + std::to_string(reply.code) + "/" +
                    std::to_string(reply.err_code) + ")";
  } else if (reply.total.value_or(1) == 0) {
    lookup->status = DeliveryStatus::kTargetRefused;
    lookup->answered = true;
    lookup->error = "no JetStream stream captures subject " + shown + " (no responders)";
  } else {
    lookup->error = "no responders on subject " + shown +
                    ", though a stream captures it: the stream is not ready yet";
  }
  for (const SendRef &ref : lookup->waiting) {
    sends_.Settle(ref, lookup->status, lookup->error, lookup->answered);
  }
}

// The connection is gone (or was replaced): answers to what was sent may
// never come.
void NatsSink::LoseConnection(const std::string &reason, KeyedSends::Loss loss) {
  sends_.FailOutstanding(reason, loss);
  NoteDown(reason);
}

bool NatsSink::AwaitsLookup(SendRef ref) const {
  for (const Lookup &lookup : lookups_) {
    for (const SendRef &w : lookup.waiting) {
      if (w.ticket == ref.ticket && w.index == ref.index) return true;
    }
  }
  return false;
}

// Settles what waited in vain until now. A server that answered nothing at
// all since such a message was sent has stopped answering: the sink is down
// and everything outstanding is retriable at once. The connection stays:
// libnats's pings find a dead one and reconnect, and a new connection would
// make the next Send wait for connect_timeout_ms on a server that is
// stopped; answers that come later match no open message.
void NatsSink::Expire(Clock::time_point now) {
  SendRef ref;
  Clock::time_point deadline;
  while (sends_.Overdue(now, &ref, &deadline)) {
    if (last_answer_ < deadline - Millis(options_.ack_timeout_ms)) {
      LoseConnection("no answer from " + servers_text_ + " within " +
                         std::to_string(options_.ack_timeout_ms) + " ms",
                     KeyedSends::Loss::kNotAMessage);
      break;
    }
    sends_.Settle(ref, DeliveryStatus::kRetriable,
                  (AwaitsLookup(ref)
                       ? "no answer from JetStream's stream lookup (after no responders) within "
                       : "no acknowledgement from JetStream within ") +
                      std::to_string(options_.ack_timeout_ms) + " ms",
                  false);
  }
  for (Lookup &lookup : lookups_) {
    if (lookup.done || lookup.deadline > now) continue;
    lookup.done = true;
    lookup.error = "no answer from JetStream's stream lookup within " +
                   std::to_string(options_.ack_timeout_ms) + " ms";
  }
}

}  // namespace outbox
