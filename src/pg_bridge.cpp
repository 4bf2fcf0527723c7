// Implementation of the exception-to-ereport shim (see pg_bridge.hpp).
#include "pg_bridge.hpp"

#include <cstring>
#include <new>

extern "C" {
#include "mb/pg_wchar.h"
}

namespace outbox {

namespace {
constexpr int kQuoteLimit = 64;  // bytes of a bad value quoted in an error
}  // namespace

const char *QuoteValue(const char *value, int len) {
  const int cut = pg_mbcliplen(value, len, kQuoteLimit);
  return psprintf("\"%.*s\"%s", cut, value, cut < len ? "..." : "");
}

const char *QuoteText(const text *value) {
  return QuoteValue(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
}

namespace bridge {

namespace {
void CopyText(char *dst, size_t size, const char *src) {
  std::strncpy(dst, src, size - 1);
  dst[size - 1] = '\0';
}
}  // namespace

void Capture(CaughtError *out) noexcept {
  out->hint[0] = '\0';
  try {
    throw;
  } catch (const SqlError &e) {
    out->sqlstate = e.sqlstate();
    CopyText(out->message, sizeof out->message, e.what());
    CopyText(out->hint, sizeof out->hint, e.hint().c_str());
  } catch (const std::bad_alloc &) {
    out->sqlstate = ERRCODE_OUT_OF_MEMORY;
    CopyText(out->message, sizeof out->message, "out of memory");
  } catch (const std::exception &e) {
    out->sqlstate = ERRCODE_INTERNAL_ERROR;
    CopyText(out->message, sizeof out->message, e.what());
  } catch (...) {
    out->sqlstate = ERRCODE_INTERNAL_ERROR;
    CopyText(out->message, sizeof out->message, "unknown C++ exception");
  }
}

void Raise(const CaughtError &error) {
  ereport(ERROR, (errcode(error.sqlstate), errmsg("%s", error.message),
                  error.hint[0] != '\0' ? errhint("%s", error.hint) : 0));
  pg_unreachable();
}

void HideStatement(void *) { errhidestmt(true); }

}  // namespace bridge
}  // namespace outbox
