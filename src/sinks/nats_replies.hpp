// How the NATS sink reads and judges JetStream's answers: a publish's
// acknowledgement (PubAck) or its error, and the answer to the stream lookup
// it makes after "no responders". Plain functions of the answer's text, so
// that their tables are tested on their own (test/unit/nats_replies_test.cpp).
// No libnats and no PostgreSQL header here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/sink.hpp"

namespace outbox {

// The members of a JetStream API answer that the sink reads, from
// {"stream":"ORDERS","seq":7,"duplicate":true} (a PubAck),
// {"error":{"code":503,"err_code":10077,"description":"maximum messages
// exceeded"},"stream":"ORDERS"} (a refusal) or
// {"type":"...stream_names_response","total":1,"streams":["ORDERS"]}.
struct JetStreamReply {
  std::optional<std::string> stream;
  std::optional<uint64_t> seq;
  bool duplicate = false;
  std::optional<int64_t> total;  // STREAM.NAMES: how many streams matched
  bool has_error = false;
  int64_t code = 0;      // the error's HTTP-like code (400, 503, ...)
  int64_t err_code = 0;  // JetStream's own error code (10077, ...)
  std::string description;
};

// Reads a JetStream API answer: false when `json` is not one JSON object
// (then *out is unspecified). Members it does not know are skipped; a
// member of the wrong type counts as absent.
bool ParseJetStreamReply(std::string_view json, JetStreamReply *out);

// A PubAck: the message is stored (or was already, within the stream's
// duplicate window: duplicate). Needs a stream name and no error.
inline bool IsPubAck(const JetStreamReply &reply) {
  return !reply.has_error && reply.stream.has_value() && !reply.stream->empty();
}

// How the sink treats JetStream's refusal of one published message:
// - kRejected: the message itself (too large for the stream, its headers too
//   large, an expectation it carried that failed): retrying it alone fails
//   the same way;
// - kTargetRefused: the stream that captures the subject cannot take
//   messages now (full under discard=new: maximum messages, bytes or
//   messages per subject; sealed): an attempt for the event, never a sign
//   that the sink is down;
// - kRetriable: JetStream or the account is in a state that passes or
//   concerns every subject (insufficient resources, account limits,
//   JetStream not enabled or temporarily unavailable, a store failure), and
//   codes we do not know.
DeliveryStatus ClassifyJetStreamError(int64_t code, int64_t err_code, std::string_view description);

// The text of a refusal for messages and logs: "JetStream refused it:
// maximum messages exceeded (503/10077)".
std::string JetStreamErrorText(const JetStreamReply &reply);

}  // namespace outbox
