#include "emit/payload_json.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/numeric.h"
}

namespace outbox {

namespace {

void AppendScalar(StringInfo out, const JsonbValue &v) {
  switch (v.type) {
    case jbvNull:
      appendStringInfoString(out, "null");
      break;
    case jbvBool:
      appendStringInfoString(out, v.val.boolean ? "true" : "false");
      break;
    case jbvNumeric: {
      // Freed at once: a payload of many numbers would otherwise leave one
      // string per number in the caller's memory context.
      char *digits =
          DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v.val.numeric)));
      appendStringInfoString(out, digits);
      pfree(digits);
      break;
    }
    case jbvString: {
      // escape_json needs a NUL-terminated string.
      char *s = pnstrdup(v.val.string.val, v.val.string.len);
      escape_json(out, s);
      pfree(s);
      break;
    }
    default:
      elog(ERROR, "outbox: unexpected jsonb value type %d", static_cast<int>(v.type));
  }
}

}  // namespace

void AppendCompactJson(StringInfo out, JsonbContainer *container) {
  JsonbIterator *it = JsonbIteratorInit(container);
  JsonbValue v;
  JsonbIteratorToken token;
  // Whether the next element or key at the current depth needs a comma.
  bool need_comma = false;
  bool raw_scalar = false;
  while ((token = JsonbIteratorNext(&it, &v, false)) != WJB_DONE) {
    switch (token) {
      case WJB_BEGIN_ARRAY:
        if (v.val.array.rawScalar) {
          raw_scalar = true;  // a bare scalar is stored as a one-element array
          break;
        }
        if (need_comma) appendStringInfoChar(out, ',');
        appendStringInfoChar(out, '[');
        need_comma = false;
        break;
      case WJB_BEGIN_OBJECT:
        if (need_comma) appendStringInfoChar(out, ',');
        appendStringInfoChar(out, '{');
        need_comma = false;
        break;
      case WJB_END_ARRAY:
        if (!raw_scalar) appendStringInfoChar(out, ']');
        need_comma = true;
        break;
      case WJB_END_OBJECT:
        appendStringInfoChar(out, '}');
        need_comma = true;
        break;
      case WJB_KEY:
        if (need_comma) appendStringInfoChar(out, ',');
        AppendScalar(out, v);
        appendStringInfoChar(out, ':');
        need_comma = false;  // the value follows the colon directly
        break;
      case WJB_VALUE:
      case WJB_ELEM:
        if (need_comma) appendStringInfoChar(out, ',');
        AppendScalar(out, v);
        need_comma = true;
        break;
      default:
        break;
    }
  }
}

}  // namespace outbox
