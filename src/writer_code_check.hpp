// What emit() refuses to run as its owner.
//
// emit() writes its row as the function's owner (the writer), in the
// caller's backend. Whatever the row's INSERT runs there (index expressions
// and predicates, column defaults and generated columns, CHECK constraints,
// INSERT triggers and their WHEN conditions, rules, and row security
// policies forced on the owner, of outbox.events and of the day's
// partition) runs as the writer, and some of it was bound to
// objects when the caller's backend first loaded it, with the caller's
// search_path, not the writer's:
// - PostgreSQL inlines an SQL function in an index expression or predicate
//   when a backend first loads the index;
// - PL/pgSQL resolves the names and types of a function's body when the
//   backend first runs it, and keeps them for the backend's life;
// so a caller can run the operator's function once with a search_path of
// its own (temporary schema included) and have emit() run what that bound
// to. Pinning search_path while emit() writes cannot undo bindings made
// before. What this file allows cannot have been bound by the caller:
// - built-in functions (OIDs below FirstNormalObjectId);
// - C and internal functions that the writer or a superuser owns (only a
//   superuser can create one);
// - functions in any other language that the writer or a superuser owns
//   and that are declared with SET search_path (then never inlined, and
//   compiled under their own path);
// and no domain but built-in ones (a domain's CHECK is planned, and SQL
// functions in it inlined, when a backend first uses the domain).
// Functions these call are the owner's to declare the same way
// (docs/security.md).
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "utils/rel.h"
}

namespace outbox {

// Raise 42501, naming the object and where it is used, when the INSERT of
// an event into `parent` (outbox.events) and `part` (the partition it lands
// in; nullptr when that is not known: then only outbox.events itself is
// looked at) would run code the rules above do not allow. `watch_index` is
// called with the OID of every index it looked at, whose relcache
// invalidation must make the caller check again, and `watch_row` with the
// syscache (PROCOID, TYPEOID) and hash of the catalog row of every function
// and domain it allowed that is not built in (a change to one must too). Requires locks on both
// relations. Loads the indexes' expressions and predicates into the relcache: call it with
// search_path pinned, in a memory context the code it runs may not reset.
void RefuseCodeTheCallerCouldBind(Relation parent, Relation part, Oid writer,
                                  void (*watch_index)(Oid), void (*watch_row)(int, uint32));

}  // namespace outbox
