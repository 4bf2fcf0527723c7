// Acting as the owner of outbox.events (outbox_writer): the identity every
// statement of the workers that can reach code on outbox's tables runs as,
// and whose ownership the catalog functions check and take on.
#pragma once

#include "pg_bridge.hpp"

namespace outbox {

// Who the workers' SQL runs as. The workers connect as
// the bootstrap superuser, but every statement that can reach code someone
// else wrote (the claims and outcome updates fire triggers and evaluate
// constraints, defaults and index expressions on outbox.events; maintenance
// moves rows and drops partitions) runs as the owner of outbox.events (the
// extension's owner, unless a superuser gave the table away), in a
// security-restricted operation, as autovacuum runs index functions as the
// table owner: a trigger a non-superuser owner adds on outbox.events runs
// with the owner's rights, never more, and cannot change the session (SET
// made inside is undone when the scope is left). Inside a transaction, after
// the extension was found; LeaveExtensionOwner before the commit. An ERROR
// needs nothing: aborting the transaction restores the user and settings.
struct OwnerScope {
  Oid saved_user = InvalidOid;
  int saved_context = 0;
  int guc_nest = 0;
};
void EnterExtensionOwner(OwnerScope *scope);
void LeaveExtensionOwner(const OwnerScope &scope);

// The owner of outbox.events (InvalidOid when the extension is not
// installed). Needs a transaction.
Oid EventsOwner();

}  // namespace outbox
