// See key_slot.hpp.
#include "shmem/key_slot.hpp"

#include "core/key_slots.hpp"

extern "C" {
#include "catalog/pg_collation.h"
#include "fmgr.h"
#include "utils/builtins.h"
}

namespace outbox {

int KeySlotOf(Datum key) {
  static_assert((kKeySlots & (kKeySlots - 1)) == 0, "kKeySlots must be a power of two");
  return DatumGetInt32(DirectFunctionCall1Coll(hashtext, DEFAULT_COLLATION_OID, key)) &
         (kKeySlots - 1);
}

}  // namespace outbox

extern "C" {
PG_FUNCTION_INFO_V1(outbox_key_slot);
}

// outbox.key_slot(key text) RETURNS int, STRICT: nothing here can throw.
extern "C" Datum outbox_key_slot(PG_FUNCTION_ARGS) {
  PG_RETURN_INT32(outbox::KeySlotOf(PG_GETARG_DATUM(0)));
}
