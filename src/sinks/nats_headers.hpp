// Which headers a NATS message carries: the format's (core/message_format.hpp,
// HeaderedHeaders with CloudEvents in binary mode), less the user headers
// NATS or JetStream would read as their own or that a NATS header cannot
// carry, plus Nats-Msg-Id. Plain functions, tested as a table
// (test/unit/nats_replies_test.cpp). No libnats and no PostgreSQL header.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sink.hpp"

namespace outbox {

// What becomes of a header the format produced:
enum class NatsHeaderUse {
  kKept,
  // A name NATS or JetStream gives a meaning (compared ignoring case):
  // every name starting with "Nats-" (Nats-Msg-Id, Nats-Expected-Stream,
  // Nats-Expected-Last-Sequence, Nats-Expected-Last-Subject-Sequence,
  // Nats-Expected-Last-Msg-Id, Nats-Rollup, ...), and "Status" and
  // "Description", which clients read as a status message's code and text
  // (a "Status: 503" header reads as "no responders" to some).
  kMeaningToNats,
  // Not a header name: empty, or a byte outside printable ASCII, or ':'.
  kBadName,
  // A value holding CR, LF or NUL, which would end the header line (and
  // could start a forged one).
  kBadValue,
};
NatsHeaderUse ClassifyNatsHeader(std::string_view name, std::string_view value);

// The headers of `m` as the NATS sink sends them, Nats-Msg-Id (the event id)
// first. User headers that ClassifyNatsHeader does not keep are left out.
// When one of outbox's own headers cannot travel (outbox-key or
// ce-partitionkey when the key holds CR, LF or NUL; ce-source likewise),
// returns why, and the message is refused rather than sent without it.
// Views point into `m`, static strings or *scratch, as HeaderedHeaders'.
std::optional<std::string> NatsHeaders(const OutMessage &m, std::string *scratch,
                                       std::vector<Header> *out);

}  // namespace outbox
