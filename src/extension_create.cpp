// CREATE EXTENSION outbox WITH SCHEMA (see extension_create.hpp).
#include "extension_create.hpp"

extern "C" {
#include "commands/defrem.h"
#include "nodes/pg_list.h"
}

namespace outbox {

void CheckCreateExtension(const CreateExtensionStmt *stmt) {
  if (stmt->extname == nullptr || strcmp(stmt->extname, "outbox") != 0) return;
  ListCell *cell;
  foreach (cell, stmt->options) {
    const DefElem *option = lfirst_node(DefElem, cell);
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
