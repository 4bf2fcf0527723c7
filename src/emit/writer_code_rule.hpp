// The rule for code that runs when emit() writes: only built-in code and
// outbox's own.
//
// emit() writes its row as the writer (the owner of outbox.emit()), in the
// caller's backend. Whatever an INSERT of that row runs (triggers, rules,
// row security policies, column defaults, CHECK constraints, domains, index
// expressions and predicates, operator classes, partition keys, table access
// methods) runs there as the writer, and code of a user's can be bound to the
// caller's objects before emit() ever runs (an SQL function is inlined, a
// PL/pgSQL body resolves its names, when a backend first uses them, with that
// backend's search_path). So nothing is judged by who owns it or how it is
// declared: on outbox.events and on every partition an event can reach,
// - the only INSERT triggers are outbox's own counting triggers on the
//   partitions (statement-level, calling outbox.count_changes(), no WHEN
//   condition; they never fire for a row routed through outbox.events); any
//   other, disabled or internal (a foreign key's check) included, is
//   refused. Triggers on UPDATE, DELETE or TRUNCATE only never run when
//   emit() writes, but the publisher evaluates their WHEN condition when it
//   updates events: it is held to the rule for expressions below;
// - there is no rule, no row security and no policy;
// - every column is of a built-in type (no domain), every partition is a
//   table of a built-in access method (no foreign table);
// - every expression stored for a column default or generated column, a
//   CHECK constraint, an index's expressions and predicate, and a partition
//   key uses only the expression nodes listed in writer_code_rule.cpp, only
//   built-in types, and only built-in functions that are immutable and not
//   SQL text looked up when run (a column default may also call now() and
//   the other clocks, and gen_random_uuid());
// - every index uses a built-in access method and built-in operator
//   classes, and every partition key built-in operator classes.
// "Built-in" is an OID below FirstNormalObjectId: made by initdb, never by
// CREATE. Expressions are judged as stored in the catalogs, before the
// relcache loads (and constant-folds) them.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "utils/rel.h"
}

namespace outbox {

// Raise 42501, naming the object and the relation it is on, when `rel`
// (outbox.events or one of its partitions) has anything the rule above
// refuses. `watch` is called with the OID of every index looked at, whose
// relcache invalidation must make the caller look again. Requires a lock on
// `rel`; reads only the catalogs (never the relcache's expression trees or
// partition key, which loading would fold); allocates in the current memory
// context.
void RefuseCodeNotBuiltIn(Relation rel, void (*watch)(Oid));

// The part of the rule for outbox's other tables (outbox.counts,
// outbox.sinks, ...), which emit() does not write but outbox's own code
// does, as the writer, and whose own constraints (a foreign key's triggers)
// the whole rule would refuse: no rule, no row security and no policy;
// every column's type, default and CHECK constraint, every index, and every
// trigger's WHEN condition, held to the rule above. The same message and locking as
// RefuseCodeNotBuiltIn.
void RefuseIndexCodeNotBuiltIn(Relation rel);

// Why an expression as the parser made it (not yet stored, nor folded)
// breaks the rule for stored expressions (nullptr: it does not). For a
// statement checked before it runs.
const char *ExpressionWhyNot(Node *expression);
// Whether operator class `opclass` is built in.
bool OpclassBuiltIn(Oid opclass);

// RefuseCodeNotBuiltIn's message is "outbox: emit() does not write while
// outbox.<relation> has <object>": the part after "while " ("outbox.<relation>
// has <object>"), for callers that give the same refusal in their own words;
// nullptr for any other message.
const char *RefusedCodeOf(const char *message);

}  // namespace outbox
