// Reading the rows a claim took (see claim_rows.hpp).
#include "publisher/claim_rows.hpp"

#include <new>

#include "emit/payload_json.hpp"
#include "publisher/spi_rows.hpp"

extern "C" {
#include "access/detoast.h"
#include "utils/builtins.h"
#include "utils/uuid.h"
}

namespace outbox {
namespace {

// Fill *event from a claimed row and its texts (all strings palloc'd).
void ReadEvent(HeapTuple row, TupleDesc desc, const RowTexts &texts, EventRow *event,
               Claimed *claimed) {
  bool isnull = false;
  claimed->tableoid = DatumGetObjectId(SPI_getbinval(row, desc, kTableOid, &isnull));
  claimed->ctid =
      *reinterpret_cast<ItemPointer>(DatumGetPointer(SPI_getbinval(row, desc, kCtid, &isnull)));
  Datum id = SPI_getbinval(row, desc, kId, &isnull);
  event->id = View(DatumGetCString(DirectFunctionCall1(uuid_out, id)));
  event->topic = View(TextColumn(row, desc, kTopic, &isnull));
  const char *key = TextColumn(row, desc, kKey, &isnull);
  event->has_key = !isnull;
  event->key = isnull ? std::string_view() : View(key);

  event->payload = std::string_view(texts.payload.data, texts.payload.len);

  Datum headers_datum = SPI_getbinval(row, desc, kHeaders, &isnull);
  if (!isnull) {
    Jsonb *headers = DatumGetJsonbP(headers_datum);
    const int count = JB_ROOT_COUNT(headers);
    Header *list = static_cast<Header *>(palloc0(sizeof(Header) * (count + 1)));
    int i = 0;
    ForEachMember(headers, [&](std::string_view key, const JsonbValue &value) {
      new (&list[i]) Header();
      list[i].name = std::string_view(pnstrdup(key.data(), key.size()), key.size());
      if (value.type == jbvString) {  // emit() allows only strings
        list[i].value = std::string_view(pnstrdup(value.val.string.val, value.val.string.len),
                                         value.val.string.len);
      }
      ++i;
    });
    event->headers = list;
    event->header_count = static_cast<size_t>(i);
  }
  event->headers_json = std::string_view(texts.headers.data, texts.headers.len);
  event->attempts = DatumGetInt32(SPI_getbinval(row, desc, kAttempts, &isnull));
  event->created_at = DatumGetTimestampTz(SPI_getbinval(row, desc, kCreatedAt, &isnull));
}

int CompareEventIds(const void *a, const void *b) {
  const EventRow *x = *static_cast<EventRow *const *>(a);
  const EventRow *y = *static_cast<EventRow *const *>(b);
  return x->id.compare(y->id);
}

// A payload or headers value whose jsonb is larger than this cannot become
// a message: as JSON text it may grow sixfold (control characters), or far
// more (a number's exponent), past the 1 GB PostgreSQL can hold in one
// value. emit() never stores one with
// the default settings; a row INSERTed by hand or an outbox.max_payload_bytes
// raised that far can. Such an event goes dead at once instead of failing
// every cycle (and holding up every other event) for good.
constexpr int64 kMaxPublishableBytes = int64{160} * 1024 * 1024;

// Whether a claimed row can be turned into a message (see above).
bool Publishable(HeapTuple row, TupleDesc desc, int64 *size) {
  for (int col : {kPayload, kHeaders}) {
    bool isnull = false;
    const Datum d = SPI_getbinval(row, desc, col, &isnull);
    if (isnull) continue;
    *size = static_cast<int64>(toast_raw_datum_size(d));
    if (*size > kMaxPublishableBytes) return false;
  }
  return true;
}

// What a claimed row costs the publisher to hold for the cycle: the row
// itself, its payload and headers as jsonb (detoasted when they were
// compressed or stored apart) and as the JSON text the messages carry (made
// here, into *texts, and used for the message; counted as allocated), and
// its key. The text matters most: a jsonb number such as 1e100000 takes a
// few bytes and prints as 100,001 digits, so the jsonb size is no bound on
// what the publisher holds; the rest bounds how many small events a claim
// takes. A row too large to publish is weighed, but not turned into text,
// by its jsonb sizes.
int64 WeighRow(HeapTuple row, TupleDesc desc, RowTexts *texts) {
  int64 weight = static_cast<int64>(row->t_len);
  for (int col : {kKey, kPayload, kHeaders}) {
    bool isnull = false;
    const Datum d = SPI_getbinval(row, desc, col, &isnull);
    if (!isnull) weight += static_cast<int64>(toast_raw_datum_size(d));
  }
  int64 size = 0;
  if (!Publishable(row, desc, &size)) return weight;
  bool isnull = false;
  initStringInfo(&texts->payload);
  Jsonb *payload = DatumGetJsonbP(SPI_getbinval(row, desc, kPayload, &isnull));
  AppendCompactJson(&texts->payload, &payload->root);
  initStringInfo(&texts->headers);
  const Datum headers = SPI_getbinval(row, desc, kHeaders, &isnull);
  if (isnull) {
    appendStringInfoString(&texts->headers, "{}");
  } else {
    AppendCompactJson(&texts->headers, &DatumGetJsonbP(headers)->root);
  }
  return weight + texts->payload.maxlen + texts->headers.maxlen;
}

}  // namespace

ClaimedRows FetchClaimedRows(Portal portal, int limit, int64 *bytes_left) {
  constexpr int kFetchRows = 64;
  ClaimedRows claimed;
  claimed.rows = static_cast<HeapTuple *>(palloc(sizeof(HeapTuple) * limit));
  claimed.texts = static_cast<RowTexts *>(palloc0(sizeof(RowTexts) * limit));
  while (claimed.n < limit && !claimed.cut) {
    SPI_cursor_fetch(portal, true, Min(limit - claimed.n, kFetchRows));
    const int got = static_cast<int>(SPI_processed);
    if (got == 0) break;
    claimed.desc = SPI_tuptable->tupdesc;
    for (int i = 0; i < got && !claimed.cut; ++i) {
      HeapTuple row = SPI_tuptable->vals[i];
      *bytes_left -= WeighRow(row, claimed.desc, &claimed.texts[claimed.n]);
      claimed.rows[claimed.n++] = row;
      claimed.cut = *bytes_left <= 0 && claimed.n < limit;
    }
  }
  return claimed;
}

IdPosition ClaimedId(const ClaimedRows &claimed, int i) {
  bool isnull = false;
  const pg_uuid_t *id = DatumGetUUIDP(SPI_getbinval(claimed.rows[i], claimed.desc, kId, &isnull));
  return IdPositionFromBytes(id->data);
}

// Read and sort the rows of the last claims into a batch (palloc'd).
Batch ReadBatch(Dispatcher *dispatcher, const ClaimedRows &retry, const ClaimedRows &ready) {
  Batch b;
  b.n = retry.n + ready.n;
  EventRow *events = static_cast<EventRow *>(palloc(sizeof(EventRow) * b.n));
  Claimed *claimed_by_event = static_cast<Claimed *>(palloc(sizeof(Claimed) * b.n));
  b.claimed = static_cast<Claimed *>(palloc(sizeof(Claimed) * b.n));
  b.outcomes = static_cast<RowOutcome *>(palloc(sizeof(RowOutcome) * b.n));
  int nevents = 0;
  int ndead = 0;
  for (int i = 0; i < b.n; ++i) {
    const ClaimedRows &from = i < retry.n ? retry : ready;
    const int at_claim = i < retry.n ? i : i - retry.n;
    HeapTuple row = from.rows[at_claim];
    int64 size = 0;
    if (Publishable(row, from.desc, &size)) {
      new (&events[nevents]) EventRow();
      ReadEvent(row, from.desc, from.texts[at_claim], &events[nevents], &claimed_by_event[nevents]);
      ++nevents;
      continue;
    }
    // At the end of the batch, dead with a reason; never detoasted.
    const int at = b.n - 1 - ndead++;
    bool isnull = false;
    b.claimed[at].tableoid = DatumGetObjectId(SPI_getbinval(row, from.desc, kTableOid, &isnull));
    b.claimed[at].ctid = *reinterpret_cast<ItemPointer>(
        DatumGetPointer(SPI_getbinval(row, from.desc, kCtid, &isnull)));
    RowOutcome *o = new (&b.outcomes[at]) RowOutcome();
    o->outcome = Outcome::kDead;
    o->attempts = DatumGetInt32(SPI_getbinval(row, from.desc, kAttempts, &isnull)) + 1;
    snprintf(o->error, sizeof o->error, "too large to publish: %lld bytes as jsonb (at most %lld)",
             static_cast<long long>(size), static_cast<long long>(kMaxPublishableBytes));
    const char *id =
        DatumGetCString(DirectFunctionCall1(uuid_out, SPI_getbinval(row, from.desc, kId, &isnull)));
    ereport(WARNING, (errmsg("outbox: event %s is dead: %s", id, o->error)));
    // It no longer holds back its key (it may have, after retry_dead()).
    EventRow dead;
    dead.id = View(id);
    dead.topic = View(TextColumn(row, from.desc, kTopic, &isnull));
    const char *key = TextColumn(row, from.desc, kKey, &isnull);
    dead.has_key = !isnull;
    if (dead.has_key) dead.key = View(key);
    if (!dispatcher->NoteDead(dead)) {
      ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                      errmsg("outbox: the publisher ran out of memory while updating the "
                             "per-key order state")));
    }
  }
  // The dispatcher wants id order (= emit order per session).
  b.sendable = nevents;
  EventRow **order = static_cast<EventRow **>(palloc(sizeof(EventRow *) * (nevents + 1)));
  for (int i = 0; i < nevents; ++i) order[i] = &events[i];
  qsort(order, nevents, sizeof(EventRow *), CompareEventIds);
  b.rows = static_cast<EventRow *>(palloc(sizeof(EventRow) * (nevents + 1)));
  for (int i = 0; i < nevents; ++i) {
    new (&b.rows[i]) EventRow(*order[i]);
    b.claimed[i] = claimed_by_event[order[i] - events];
    new (&b.outcomes[i]) RowOutcome();
  }
  return b;
}

}  // namespace outbox
