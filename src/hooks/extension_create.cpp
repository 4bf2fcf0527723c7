// CREATE EXTENSION outbox WITH SCHEMA (see extension_create.hpp).
#include "hooks/extension_create.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "commands/defrem.h"
#include "nodes/pg_list.h"
}

namespace outbox {

void CheckCreateExtension(const CreateExtensionStmt *stmt) {
  if (stmt->extname == nullptr || strcmp(stmt->extname, "outbox") != 0) return;
  ListCell *cell;
  foreach (cell, stmt->options) {
    const DefElem *option = lfirst_node(DefElem, cell);
    // An earlier version's install script (VERSION '0.1.0') takes over a
    // schema outbox that someone made, whose owner could then plant code in
    // it that the script and the views run; the current one refuses such a
    // schema itself.
    if (strcmp(option->defname, "new_version") == 0 &&
        OidIsValid(get_namespace_oid("outbox", true))) {
      ereport(ERROR, (errcode(ERRCODE_DUPLICATE_SCHEMA), errmsg("schema \"outbox\" already exists"),
                      errdetail("CREATE EXTENSION outbox creates schema outbox itself, whatever "
                                "version it installs."),
                      errhint("Drop or rename that schema (after checking what it holds), then "
                              "create the extension.")));
    }
    // pg_dump writes WITH SCHEMA pg_catalog, where the control file records
    // the extension: that one is fine.
    if (strcmp(option->defname, "schema") != 0 ||
        strcmp(defGetString(const_cast<DefElem *>(option)), "pg_catalog") == 0) {
      continue;
    }
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("outbox cannot be installed in a schema of your choice"),
                    errdetail("CREATE EXTENSION outbox creates schema outbox and puts everything "
                              "there; its functions and docs name outbox.events, outbox.emit()."),
                    errhint("Leave out WITH SCHEMA: CREATE EXTENSION outbox;")));
  }
}

}  // namespace outbox
