// The key slot of an event's key: the one definition of the hash that
// decides which publisher handles a key (core/key_slots.hpp says why there
// are slots). emit() calls it to wake the key's publisher, and SQL calls it
// as outbox.key_slot(key), which the claims filter on.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// The low bits of PostgreSQL's hashtext() under the default collation (the
// function hash indexes and hash partitioning use for text: stable across
// restarts and platforms), in [0, kKeySlots). `key` is a text Datum.
int KeySlotOf(Datum key);

}  // namespace outbox
