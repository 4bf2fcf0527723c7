// The Dispatcher's lists that the claims take as text[] parameters (claim.cpp):
// the topics they leave alone this cycle, the LIKE patterns of the routes
// that deliver, and the ids that owe late answers (configuration.cpp).
//
// The lists come from the Dispatcher as C++ strings and are copied into
// PostgreSQL's memory by code that calls no PostgreSQL function while a C++
// object lives (see claim_lists.cpp).
#pragma once

#include "pg_bridge.hpp"

#include "core/dispatch.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {

// Set the claims' text[] of topics to leave alone this cycle (in
// CurrentMemoryContext, the cycle's; out of memory: none). Returns true when
// a topic left alone last cycle is not any more: its events may sit below
// the ready floor.
bool SetSkippedTopics(const Dispatcher *dispatcher, TimestampTz now);
// That text[], as the last SetSkippedTopics of this cycle left it.
Datum SkippedTopics();

// Set the LIKE patterns of the routes that deliver (Dispatcher::
// DeliverableLikePatterns) as a text[] in a context of their own that lives
// until the next call: they are a parameter of every ready claim. ERROR when
// out of memory. Returns whether the list changed.
bool SetDeliverablePatterns(const Dispatcher *dispatcher);
// That text[], and how many patterns it holds.
Datum DeliverablePatterns();
int DeliverableCount();

// Dispatcher::LateIds as a text[] in CurrentMemoryContext (ERROR when out of
// memory).
Datum LateAnswerIds(const Dispatcher *dispatcher);

}  // namespace outbox
