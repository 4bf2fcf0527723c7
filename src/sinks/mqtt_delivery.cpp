// The MQTT sink's outcomes as acknowledgements arrive: KeyedSink's part
// (keyed_sink.hpp). A Send connects without waiting (the CONNACK, like every
// acknowledgement, is read by Step, from CollectFor, Collect and Poll), so a
// broker that stops answering, or one that takes TCP connections but never
// answers them, delays only its own Sends. Runs on the owner's thread only
// (mqtt_sink_class.hpp).
#include "sinks/mqtt_sink_class.hpp"

#include <algorithm>
#include <new>
#include <string>

#include "sinks/mqtt_library.hpp"

namespace outbox {

std::string MqttSink::UpText() const {
  return "the MQTT broker " + Where() + " acknowledges messages again";
}

// A connection for a new Send: the one there is, unless it was lost (then
// what is outstanding on it is settled first), else a new one being made.
bool MqttSink::Connect(InterruptCheck interrupted, std::string *error) {
  (void)interrupted;  // nothing here waits
  // An idle connection the broker closed (keepalive passed without Poll, a
  // broker restarted) is noticed here, before anything is sent on it.
  if (!links_.empty()) Step(0);
  if (!links_.empty()) return true;
  if (!StartClients(error)) {
    *error = Masked(*error);
    Disconnect();
    return false;
  }
  connect_deadline_ = Clock::now() + Millis(options_.connect_timeout_ms);
  return true;
}

// While connecting: drives the handshakes until every connection has its
// CONNACK or failed, or connect_timeout_ms passed. When the broker took
// some connections but not all, the sink goes on at once with those it took
// (SettleForFewer); when it took none, every open Send's messages (none of
// them was sent) are kRetriable.
void MqttSink::StepConnecting(int64_t wait_ms) {
  const auto left = std::chrono::duration_cast<Millis>(connect_deadline_ - Clock::now()).count();
  Drive(std::clamp<int64_t>(left, 0, wait_ms));
  if (callback_failed_) throw std::bad_alloc();
  if (!connected_) {
    const bool settled = std::all_of(links_.begin(), links_.end(),
                                     [](const Link &l) { return l.connected || l.failed; });
    std::string error;
    if (settled) {
      error = lost_reason_.empty() ? "cannot connect to " + Where() : lost_reason_;
    } else if (Clock::now() >= connect_deadline_) {
      error = "cannot connect to " + Where() + ": no CONNACK within " +
              std::to_string(options_.connect_timeout_ms) + " ms";
    } else {
      return;  // still connecting
    }
    error = Masked(std::move(error));
    if (!SettleForFewer(error)) {
      sends_.FailAllRest(error.c_str(), /*unsent=*/true);  // none was sent
      NoteDown(error);
      Disconnect();
      return;
    }
  }
  ForgetCaFile();  // read by libmosquitto when it connected
  std::string as = links_.size() == 1 ? "as client " : "as clients ";
  for (size_t i = 0; i < links_.size(); ++i) {
    as += (i == 0 ? "\"" : ", \"") + links_[i].client_id + "\"";
  }
  if (links_.size() > 1) as += " (" + std::to_string(links_.size()) + " connections)";
  AddLog(LogLevel::kInfo, std::string(ever_connected_ ? "reconnected" : "connected") + " to " +
                              Where() + " " + as + " (MQTT " +
                              (options_.protocol == 5 ? "5" : "3.1.1") + ")");
  ever_connected_ = true;
}

// Keeps the connections the broker took and closes the others; false (and
// nothing changes) when it took none. The kept ones are not closed and made
// again: a limit that still counted them would refuse the new ones. Nothing
// is in flight while connecting, so renumbering the connections (WireId,
// LinkFor) changes no message's connection.
bool MqttSink::SettleForFewer(const std::string &why) {
  const auto took = static_cast<size_t>(
      std::count_if(links_.begin(), links_.end(), [](const Link &l) { return l.connected; }));
  if (took == 0) return false;
  std::vector<Link> kept;
  kept.reserve(took);  // may throw: then nothing was changed
  AddLog(LogLevel::kWarning,
         "the MQTT broker " + Where() + " took " + std::to_string(took) + " of " +
             std::to_string(links_.size()) + " connections (" + why + "): the sink goes on with " +
             std::to_string(took) + " (option \"connections\" asks for " +
             std::to_string(options_.connections) + "; all are asked for again after a loss)");
  for (Link &link : links_) {
    if (link.connected) {
      kept.push_back(std::move(link));
    } else if (link.mosq != nullptr) {
      mosquitto_destroy(link.mosq);  // never connected: nothing to say goodbye on
    }
  }
  links_ = std::move(kept);
  for (size_t i = 0; i < links_.size(); ++i) {
    links_[i].index = static_cast<int>(i);
    mosquitto_user_data_set(links_[i].mosq, &links_[i]);  // the callbacks' Link moved
  }
  next_link_ = 0;
  connected_ = true;
  established_ = true;
  lost_reason_.clear();
  return true;
}

void MqttSink::Step(int64_t wait_ms) {
  if (links_.empty()) return;  // nothing is outstanding without a connection
  if (!connected_ && !lost_) {
    StepConnecting(wait_ms);
    if (!connected_) return;
    wait_ms = 0;  // the wait went to the handshake: send, read what came, return
  }
  // A Step may come late (connecting took long, or the caller stepped this
  // sink only now): what is past its Send's cut-off is not sent first.
  sends_.CutOff(Clock::now(), CutOffText());
  SendReady();
  if (links_.empty()) return;  // sending lost it
  const bool alive = Drive(sends_.MsUntilNextDeadline(Clock::now(), wait_ms));
  if (callback_failed_) throw std::bad_alloc();
  if (!alive) {
    const std::string reason =
        lost_reason_.empty() ? "the connection to " + Where() + " was lost" : lost_reason_;
    if (sends_.HasOutstanding()) {
      LoseConnection(reason, KeyedSends::Loss::kMaybeAMessage);
    } else {
      AddLog(LogLevel::kInfo, reason);
      Disconnect();
    }
    return;
  }
  if (unsure_) {
    LoseConnection("the MQTT broker " + Where() +
                       " said a packet identifier was in use (0x91): the connection starts afresh",
                   KeyedSends::Loss::kNotAMessage);
    return;
  }
  // A message that waited in vain ends the connection as a loss does: the
  // broker may still acknowledge it, under a packet identifier libmosquitto
  // would give a later message.
  SendRef overdue;
  Clock::time_point deadline;
  if (sends_.Overdue(Clock::now(), &overdue, &deadline)) {
    LoseConnection("no acknowledgement from " + Where() + " within " +
                       std::to_string(options_.ack_timeout_ms) + " ms",
                   KeyedSends::Loss::kNotAMessage);
    return;
  }
  sends_.CutOff(Clock::now(), CutOffText());
  SendReady();  // the followers of what was acknowledged
}

// The connection is gone: acknowledgements of what was sent may never come.
void MqttSink::LoseConnection(const std::string &reason, KeyedSends::Loss loss) {
  sends_.FailOutstanding(reason, loss);
  NoteDown(reason);
  Disconnect();
}

// A Send was given up with messages in flight: their packet identifiers may
// still be acknowledged, so the connection goes (and with it whatever else
// is outstanding on it, retriable).
void MqttSink::Forgotten() noexcept {
  try {
    sends_.FailOutstanding("the connection to " + Where() +
                               " was dropped: a batch given up had messages in flight on it",
                           KeyedSends::Loss::kNotAMessage);
  } catch (...) {
    sends_.FailAllRest("the connection was dropped");
  }
  Disconnect();
}

// The acknowledgement of the message that `link`'s client numbered `mid`.
void MqttSink::OnPublish(const Link &link, int mid, int reason_code) noexcept {
  try {
    SendRef ref;
    if (!sends_.FindSent(WireId(link.index, mid), &ref)) return;  // not an open Send's
    const DeliveryStatus status = MqttReasonOutcome(reason_code);
    if (status == DeliveryStatus::kDelivered) {
      NoteUp();
      sends_.Settle(ref, status, std::string(), true);
      return;
    }
    if (reason_code == 0x91) unsure_ = true;  // the session is confused: start afresh
    sends_.Settle(ref, status,
                  "the broker refused it: " + MqttReasonText(reason_code) + " (topic " +
                      ShownTopic(sends_.Message(ref).target) + ")",
                  true);
  } catch (...) {
    callback_failed_ = true;
  }
}

}  // namespace outbox
