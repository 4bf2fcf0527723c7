// A database's home: which database outbox's tables were made for.
//
// CREATE DATABASE ... TEMPLATE copies a database file by file: outbox's
// tables, their pending events and sinks come along, and a publisher started
// in the copy would deliver the template's events to the real brokers a
// second time. outbox.home holds the OID of the database the tables belong
// to, written by CREATE EXTENSION (a restore runs that, so a restored
// database is home at once: the table's rows are not dumped) and by
// outbox.publish_here(). A database whose OID is not there is a copy: its
// publisher stays stopped, says so in the log and in outbox.workers, and
// gives its background worker back.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

enum class Home {
  kHome,       // outbox.home names this database
  kCopy,       // it names another one, or none
  kUnrecorded  // no outbox.home: an installation from before 0.3.0, not updated yet
};

// Reads outbox.home straight from the heap with the active snapshot: no
// privilege check and no user code (trigger, rule, policy) involved. Needs
// a transaction and the extension installed; *from is the database the
// tables were made for (InvalidOid when the table is empty).
Home HomeOfOutbox(Oid *from);

}  // namespace outbox
