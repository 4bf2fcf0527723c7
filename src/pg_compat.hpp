// The PostgreSQL server API differences between the majors outbox builds
// against (15, 16, 17, 18), in one place, so the rest of the tree reads as
// one API. pg_bridge.hpp includes it, so every file on the PostgreSQL side
// has it.
//
// Each entry names the major that changed and what the others spell:
//   16: the varlena macros (VARDATA, VARSIZE, ...) moved to varatt.h.
//   16: pg_class_ownercheck, pg_database_ownercheck, pg_tablespace_aclcheck
//       became object_ownercheck and object_aclcheck with a catalog's OID.
//   16: a GUC check hook's `extra` is freed with guc_free(), so it must come
//       from guc_malloc(); before 16 it was freed with free().
//   16: get_guc_variables() returns its count; before, GetNumConfigOptions().
//   17: MyProc->pgprocno became MyProcNumber; MyProc->lxid became
//       MyProc->vxid.lxid.
//   17: pgstat_fetch_stat_local_beentry(i) became
//       pgstat_get_local_beentry_by_index(i).
//   18: pg_attribute_noreturn() is gone; the tree uses C++'s [[noreturn]].
//   16: expression_tree_walker and query_tree_walker became macros that cast
//       the callback to a typed pointer; 15 declares it `bool (*)()`, C's
//       unprototyped function. TreeWalker's cast suits both.
#pragma once

#include <cstddef>
#include <cstdlib>

extern "C" {
#include "postgres.h"
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_tablespace.h"
#include "miscadmin.h"
#include "nodes/nodes.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
}

namespace outbox {

// This backend's index into the proc array (what pg_stat_activity's backend
// and the lock manager call its procno).
inline int MyProcIndex() {
#if PG_VERSION_NUM >= 170000
  return MyProcNumber;
#else
  return MyProc != nullptr ? MyProc->pgprocno : -1;
#endif
}

// This backend's local transaction number (of its virtual transaction id):
// it changes with every transaction.
inline uint32 MyLocalXid() {
#if PG_VERSION_NUM >= 170000
  return MyProc != nullptr ? MyProc->vxid.lxid : 0;
#else
  return MyProc != nullptr ? MyProc->lxid : 0;
#endif
}

// Whether the current user owns the relation or the database (or is a
// superuser, as the server's own checks say).
inline bool CurrentUserOwnsRelation(Oid relid) {
#if PG_VERSION_NUM >= 160000
  return object_ownercheck(RelationRelationId, relid, GetUserId());
#else
  return pg_class_ownercheck(relid, GetUserId());
#endif
}

inline bool CurrentUserOwnsDatabase(Oid dboid) {
#if PG_VERSION_NUM >= 160000
  return object_ownercheck(DatabaseRelationId, dboid, GetUserId());
#else
  return pg_database_ownercheck(dboid, GetUserId());
#endif
}

// Whether the current user may create objects in the tablespace.
inline bool CurrentUserMayCreateIn(Oid tablespace) {
#if PG_VERSION_NUM >= 160000
  return object_aclcheck(TableSpaceRelationId, tablespace, GetUserId(), ACL_CREATE) == ACLCHECK_OK;
#else
  return pg_tablespace_aclcheck(tablespace, GetUserId(), ACL_CREATE) == ACLCHECK_OK;
#endif
}

// Whether the current user may create objects in the schema.
inline bool CurrentUserMayCreateInSchema(Oid schema) {
#if PG_VERSION_NUM >= 160000
  return object_aclcheck(NamespaceRelationId, schema, GetUserId(), ACL_CREATE) == ACLCHECK_OK;
#else
  return pg_namespace_aclcheck(schema, GetUserId(), ACL_CREATE) == ACLCHECK_OK;
#endif
}

// Whether the current user owns the extension (or is a superuser).
inline bool CurrentUserOwnsExtension(Oid extension) {
#if PG_VERSION_NUM >= 160000
  return object_ownercheck(ExtensionRelationId, extension, GetUserId());
#else
  return pg_extension_ownercheck(extension, GetUserId());
#endif
}

// Every setting the server knows; *count is set to how many.
inline struct config_generic **AllSettings(int *count) {
#if PG_VERSION_NUM >= 160000
  return get_guc_variables(count);
#else
  *count = GetNumConfigOptions();
  return get_guc_variables();
#endif
}

// The i-th (1-based) entry of this backend's snapshot of the activity
// statistics (pgstat_fetch_stat_numbackends() of them).
inline LocalPgBackendStatus *LocalBackendStatus(int i) {
#if PG_VERSION_NUM >= 170000
  return pgstat_get_local_beentry_by_index(i);
#else
  return pgstat_fetch_stat_local_beentry(i);
#endif
}

// A callback `bool f(Node *, void *)` as the tree walkers take it (see
// above): they call it with those arguments on every major.
inline auto TreeWalker(bool (*callback)(Node *, void *)) {
  return reinterpret_cast<bool (*)()>(reinterpret_cast<void (*)()>(callback));
}

// Memory for a GUC check hook's *extra, of the allocator the server frees it
// with; nullptr when out of memory (the hook then reports failure).
inline void *GucExtraAlloc(std::size_t bytes) {
#if PG_VERSION_NUM >= 160000
  return guc_malloc(LOG, bytes);
#else
  return std::malloc(bytes);
#endif
}

}  // namespace outbox
