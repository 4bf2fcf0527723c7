// Acting as the owner of outbox.events (see events_owner.hpp).
#include "catalog/events_owner.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace outbox {

Oid EventsOwner() {
  const Oid nsp = get_namespace_oid("outbox", true);
  const Oid events = OidIsValid(nsp) ? get_relname_relid("events", nsp) : InvalidOid;
  if (!OidIsValid(events)) return InvalidOid;
  HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(events));
  if (!HeapTupleIsValid(tuple)) return InvalidOid;
  const Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
  ReleaseSysCache(tuple);
  return owner;
}

void EnterExtensionOwner(OwnerScope *scope) {
  // The owner of outbox.events, whose triggers, constraints, defaults and
  // indexes our statements run: the extension's owner, unless a superuser
  // gave the table to someone else, who must not gain more than its rights.
  const Oid owner = EventsOwner();
  if (!OidIsValid(owner)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("outbox: the extension is not installed in this database")));
  }
  GetUserIdAndSecContext(&scope->saved_user, &scope->saved_context);
  SetUserIdAndSecContext(
      owner, scope->saved_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
  scope->guc_nest = NewGUCNestLevel();
}

void LeaveExtensionOwner(const OwnerScope &scope) {
  AtEOXact_GUC(false, scope.guc_nest);  // whatever code we ran SET goes
  SetUserIdAndSecContext(scope.saved_user, scope.saved_context);
}

}  // namespace outbox
