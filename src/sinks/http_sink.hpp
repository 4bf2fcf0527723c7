// The HTTP webhook sink (libcurl), and the details of it that its unit tests
// check directly: its options and URL template (http_options.hpp), its
// Standard Webhooks signatures (http_signature.hpp) and its judgement of
// answers (http_outcomes.hpp). No PostgreSQL header here.
#pragma once

#include <memory>
#include <string>

#include "core/sink.hpp"
#include "sinks/http_options.hpp"    // ParseHttpOptions, CheckHttpTarget, ExpandHttpUrl
#include "sinks/http_outcomes.hpp"   // ClassifyHttpStatus, ParseRetryAfter, HttpEndpoints
#include "sinks/http_signature.hpp"  // WebhookSignature

namespace outbox {

// Build an HTTP sink from create_sink() options (ParseHttpOptions). It
// connects on the first Publish and keeps connections alive between calls.
// Returns nullptr and sets *error when the options are invalid.
std::unique_ptr<Sink> MakeHttpSink(const std::string &name, const SinkOptions &options,
                                   std::string *error);

}  // namespace outbox
