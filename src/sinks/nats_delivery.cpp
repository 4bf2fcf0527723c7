// The NATS sink's outcomes as answers arrive: each answer on the inbox is
// matched to what was sent by its reply id and judged (nats_replies.hpp);
// a lost connection and passed deadlines settle what has no answer. Runs on
// the owner's thread only.
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
//   there). Every later "no responders" of the call is then kRetriable at
//   once: without JetStream, every subject has none.
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

void NatsSink::Judge(natsMsg *answer) {
  const char *subject = natsMsg_GetSubject(answer);
  const uint64_t id = ReplyId(subject != nullptr ? subject : "", inbox_prefix_);
  if (id < first_reply_ || id - first_reply_ >= sent_.size()) return;  // an earlier call's
  const Sent sent = sent_[id - first_reply_];
  answered_ = true;  // the server answered: the connection carries
  if (sent.lookup) {
    JudgeLookup(sent.index, answer);
  } else {
    JudgeMessage(sent.index, answer);
  }
}

void NatsSink::JudgeMessage(size_t i, natsMsg *answer) {
  const Slot &slot = slots_[i];
  if (slot.settled || !slot.in_flight || slot.lookup != kNone) return;
  if (natsMsg_IsNoResponders(answer)) {
    NoResponders(i);
    return;
  }
  const std::string_view body = Body(answer);
  JetStreamReply reply;
  if (!ParseJetStreamReply(body, &reply) || (!IsPubAck(reply) && !reply.has_error)) {
    // Something else listens on the subject and answered: the message went
    // to it, not to a stream.
    Settle(i, DeliveryStatus::kTargetRefused,
           "the answer on its subject is not JetStream's (no stream captures it, and something "
           "else answers): " +
               Excerpt(body),
           true);
    return;
  }
  if (IsPubAck(reply)) {
    if (reply.duplicate) ++duplicates_;
    NoteUp();
    Settle(i, DeliveryStatus::kDelivered, std::string(), true);
    return;
  }
  Settle(i, ClassifyJetStreamError(reply.code, reply.err_code, reply.description),
         JetStreamErrorText(reply), true);
}

// Message i had no responders: judged by what JetStream says of its subject
// (see the top of this file).
void NatsSink::NoResponders(size_t i) {
  if (api_silent_) {
    Settle(i, DeliveryStatus::kRetriable, kApiSilent, false);
    return;
  }
  const std::string_view subject = messages_[i].target;
  for (size_t l = 0; l < lookups_.size(); ++l) {
    Lookup &lookup = lookups_[l];
    if (lookup.subject != subject) continue;
    if (lookup.done) {
      Settle(i, lookup.status, lookup.error, lookup.answered);
    } else {
      slots_[i].lookup = l;
    }
    return;
  }
  SendLookup(i);
}

void NatsSink::JudgeLookup(size_t l, natsMsg *answer) {
  Lookup &lookup = lookups_[l];
  if (lookup.done) return;
  lookup.done = true;
  const std::string shown = "\"" + lookup.subject + "\"";  // a valid subject: printable
  JetStreamReply reply;
  if (natsMsg_IsNoResponders(answer)) {
    api_silent_ = true;
    lookup.error = kApiSilent;
    NoteDown(kApiSilent);
  } else if (!ParseJetStreamReply(Body(answer), &reply)) {
    lookup.error =
        "no responders on subject " + shown +
        ", and JetStream's stream lookup answered what is not JSON: " + Excerpt(Body(answer));
  } else if (reply.has_error) {
    lookup.error = "no responders on subject " + shown + ", and JetStream's stream lookup " +
                   "failed: " + reply.description + " (" + std::to_string(reply.code) + "/" +
                   std::to_string(reply.err_code) + ")";
  } else if (reply.total.value_or(1) == 0) {
    lookup.status = DeliveryStatus::kTargetRefused;
    lookup.answered = true;
    lookup.error = "no JetStream stream captures subject " + shown + " (no responders)";
  } else {
    lookup.error = "no responders on subject " + shown +
                   ", though a stream captures it: the stream is not ready yet";
  }
  for (size_t i = 0; i < n_; ++i) {
    if (slots_[i].lookup == l && !slots_[i].settled) {
      Settle(i, lookup.status, lookup.error, lookup.answered);
    }
  }
}

// The connection is gone (or was replaced): answers to what was sent may
// never come, and nothing more is sent in this call.
void NatsSink::LoseConnection(const std::string &reason) {
  connection_lost_ = true;
  for (size_t i : flight_order_) {
    if (!slots_[i].settled) Settle(i, DeliveryStatus::kRetriable, reason, false);
  }
  while (!ready_.empty()) {
    const size_t i = ready_.front();
    ready_.pop_front();
    if (!slots_[i].settled) Settle(i, DeliveryStatus::kRetriable, "not sent: " + reason, false);
  }
  NoteDown(reason);
}

// Settles what waited in vain until now. Messages were sent in
// flight_order_ with the same timeout, so the first unsettled one has the
// nearest deadline.
void NatsSink::Expire(Clock::time_point now) {
  while (!flight_order_.empty()) {
    const size_t i = flight_order_.front();
    if (!slots_[i].settled) {
      if (slots_[i].deadline > now) break;
      timed_out_ = true;
      Settle(i, DeliveryStatus::kRetriable,
             (slots_[i].lookup != kNone
                  ? "no answer from JetStream's stream lookup (after no responders) within "
                  : "no acknowledgement from JetStream within ") +
                 std::to_string(options_.ack_timeout_ms) + " ms",
             false);
    }
    flight_order_.pop_front();
  }
  for (Lookup &lookup : lookups_) {
    if (lookup.done || lookup.deadline > now) continue;
    lookup.done = true;
    lookup.error = "no answer from JetStream's stream lookup within " +
                   std::to_string(options_.ack_timeout_ms) + " ms";
  }
}

int64_t NatsSink::MsUntilNextDeadline(Clock::time_point now) {
  while (!flight_order_.empty() && slots_[flight_order_.front()].settled) {
    flight_order_.pop_front();
  }
  if (flight_order_.empty()) return kWaitSliceMs;
  const auto left =
      std::chrono::duration_cast<Millis>(slots_[flight_order_.front()].deadline - now).count();
  return std::max<int64_t>(0, left + 1);
}

}  // namespace outbox
