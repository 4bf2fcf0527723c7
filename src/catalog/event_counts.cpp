// outbox.count_changes(): the statement trigger that keeps outbox.counts in
// step with outbox.events (the install script says what is counted and why
// never-tried events are not). Written in C because it runs after every
// statement the publisher uses to record outcomes: the PL/pgSQL version it
// replaces built two arrays with queries over the transition tables and
// grouped them in SQL, which cost more than the UPDATE it counted.
//
// Per statement: read the transition tables (old rows subtract their state,
// new rows add theirs), sum the changes per (UTC day of created_at, topic),
// and add the sums to this transaction's shard of each row in one upsert, in
// (day, topic) order so that concurrent writers cannot deadlock on it. A
// TRUNCATE recounts everything.
//
// It also notices rows that become pending through a statement of anyone
// but a publisher: an operator's UPDATE, retry_dead(), replay(), an INSERT
// naming a partition (maintenance, a restore's COPY). The publishers' ready
// claims start from a remembered position that a never-tried row may lie
// below, and they know when the earliest retry is due only from what they
// wrote themselves (core/claim_floor.hpp, publisher/retry_due.hpp): at
// commit, they start from the beginning again and read the retry times
// afresh.
//
// Memory: everything in the trigger's call context (per query); the plan is
// kept for the backend. Runs as whoever ran the statement, with the
// function's pinned search_path; every name in its SQL is qualified anyway.
#include "pg_bridge.hpp"

#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

namespace outbox {
namespace {

// The change of one row, or of a (day, topic) group once summed.
struct Delta {
  DateADT day;
  const char *topic;  // palloc'd copy, not terminated
  int topic_len;
  int64 waiting;
  int64 published;
  int64 dead;
};

struct Columns {
  int created_at;
  int topic;
  int status;
  int next_attempt_at;
};

struct Deltas {
  Delta *items = nullptr;
  int n = 0;
  int capacity = 0;
  bool new_pending = false;  // a new row is pending
};

// The column of this name and type, or an error: the trigger reads the
// values as that type, and a role that may execute the function could fire
// it on a table of its own whose columns have these names and other types.
int ColumnOf(TupleDesc desc, const char *name, Oid type) {
  const int attnum = SPI_fnumber(desc, name);
  if (attnum <= 0 || TupleDescAttr(desc, attnum - 1)->atttypid != type) {
    ereport(ERROR,
            (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
             errmsg("outbox.count_changes() must fire on a partition of outbox.events"),
             errdetail("The table has no column \"%s\" of type %s.", name, format_type_be(type))));
  }
  return attnum;
}

Columns ColumnsOf(TupleDesc desc) {
  Columns c;
  c.created_at = ColumnOf(desc, "created_at", TIMESTAMPTZOID);
  c.topic = ColumnOf(desc, "topic", TEXTOID);
  c.status = ColumnOf(desc, "status", TEXTOID);
  c.next_attempt_at = ColumnOf(desc, "next_attempt_at", TIMESTAMPTZOID);
  return c;
}

// (created_at AT TIME ZONE 'UTC')::date, infinities included.
DateADT UtcDay(TimestampTz ts) {
  if (TIMESTAMP_IS_NOBEGIN(ts)) return DATEVAL_NOBEGIN;
  if (TIMESTAMP_IS_NOEND(ts)) return DATEVAL_NOEND;
  int64 day = ts / USECS_PER_DAY;
  if (ts % USECS_PER_DAY < 0) --day;  // floor: days before 2000-01-01
  return static_cast<DateADT>(day);
}

bool TextIs(Datum d, const char *word) {
  text *t = DatumGetTextPP(d);
  const size_t len = VARSIZE_ANY_EXHDR(t);
  return len == strlen(word) && memcmp(VARDATA_ANY(t), word, len) == 0;
}

int SumPerDayAndTopic(Deltas *deltas);

// A statement's changes are summed whenever this many rows are held (and
// then kept at most twice the groups left), so that memory follows the
// number of (day, topic) groups, not of rows: a statement may change tens of
// millions of events (retry_dead(), replay(), a bulk UPDATE).
constexpr int kSumEveryRows = 1 << 20;

// Add each row of `rows` to *out with `sign` (+1 new rows, -1 old rows).
void Collect(Tuplestorestate *rows, TupleDesc desc, int sign, Deltas *out) {
  if (rows == nullptr) return;
  const Columns col = ColumnsOf(desc);
  TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
  tuplestore_rescan(rows);
  while (tuplestore_gettupleslot(rows, true, false, slot)) {
    bool isnull = false;
    const Datum status = slot_getattr(slot, col.status, &isnull);
    const bool pending = !isnull && TextIs(status, "pending");
    const bool published = !isnull && TextIs(status, "published");
    const bool dead = !isnull && TextIs(status, "dead");
    (void)slot_getattr(slot, col.next_attempt_at, &isnull);
    const bool tried = !isnull;
    if (sign > 0 && pending) out->new_pending = true;
    if (!(pending && tried) && !published && !dead) continue;  // never tried: not counted
    const Datum created = slot_getattr(slot, col.created_at, &isnull);
    const DateADT day = isnull ? DATEVAL_NOBEGIN : UtcDay(DatumGetTimestampTz(created));
    const Datum topic_datum = slot_getattr(slot, col.topic, &isnull);
    if (isnull) continue;  // NOT NULL in the table; nothing to count under
    text *topic = DatumGetTextPP(topic_datum);
    if (out->n == out->capacity) {
      if (out->capacity >= kSumEveryRows) {
        CHECK_FOR_INTERRUPTS();
        (void)SumPerDayAndTopic(out);
      }
      if (out->capacity == 0) {
        out->capacity = 64;
        out->items = static_cast<Delta *>(palloc(sizeof(Delta) * out->capacity));
      } else if (out->n > out->capacity / 2) {
        out->capacity *= 2;
        out->items = static_cast<Delta *>(repalloc_huge(out->items, sizeof(Delta) * out->capacity));
      }
    }
    Delta &d = out->items[out->n++];
    d.day = day;
    d.topic_len = static_cast<int>(VARSIZE_ANY_EXHDR(topic));
    d.topic = pnstrdup(VARDATA_ANY(topic), d.topic_len);
    d.waiting = pending && tried ? sign : 0;
    d.published = published ? sign : 0;
    d.dead = dead ? sign : 0;
  }
  ExecDropSingleTupleTableSlot(slot);
}

int CompareDeltas(const void *a, const void *b) {
  const Delta *x = static_cast<const Delta *>(a);
  const Delta *y = static_cast<const Delta *>(b);
  if (x->day != y->day) return x->day < y->day ? -1 : 1;
  const int common = Min(x->topic_len, y->topic_len);
  const int c = memcmp(x->topic, y->topic, common);
  if (c != 0) return c;
  return x->topic_len - y->topic_len;
}

// Sum the changes per (day, topic) in place, in (day, topic) order; drop
// groups whose changes cancel out, and free the topic copies of the rows
// merged away. Leaves deltas->n at the number of groups and returns it.
int SumPerDayAndTopic(Deltas *deltas) {
  if (deltas->n == 0) return 0;
  qsort(deltas->items, deltas->n, sizeof(Delta), CompareDeltas);
  int groups = 0;
  for (int i = 0; i < deltas->n;) {
    Delta sum = deltas->items[i];
    int j = i + 1;
    for (; j < deltas->n && CompareDeltas(&deltas->items[i], &deltas->items[j]) == 0; ++j) {
      sum.waiting += deltas->items[j].waiting;
      sum.published += deltas->items[j].published;
      sum.dead += deltas->items[j].dead;
      pfree(const_cast<char *>(deltas->items[j].topic));
    }
    if (sum.waiting != 0 || sum.published != 0 || sum.dead != 0) {
      deltas->items[groups++] = sum;
    } else {
      pfree(const_cast<char *>(sum.topic));
    }
    i = j;
  }
  deltas->n = groups;
  return groups;
}

// Each (day, topic) is split into shards, so that a counted change locks a
// row few others write: the row stays locked until the transaction ends
// (until COMMIT PREPARED for a prepared one), and under REPEATABLE READ or
// SERIALIZABLE an upsert that meets a row another transaction changed after
// the snapshot fails with a serialization error.
// - A publisher writes the shard of its slot in the proc array, which no
//   other live process has: parallel publishers never wait for each other,
//   and nothing but recount() writes their rows.
// - Anyone else (an operator's retry_dead(), replay() or UPDATE, maintain())
//   writes one of kOperatorShards negative shards, picked per transaction
//   from its process and transaction numbers. So an operator's transaction
//   at REPEATABLE READ never meets a row a publisher changed (pid % 64, the
//   earlier rule, failed whenever the two matched), and a prepared
//   transaction that counted a change holds a row that a later transaction
//   meets with a chance of 1 in kOperatorShards (a process slot would hand
//   it to the next session in that slot). Two operators' transactions that
//   overlap on a day and topic meet with the same chance.
// The column is a smallint: past 32768 process slots, two publishers may
// share a shard. recount() writes shard 0, which no process uses (slot 0 is
// a client backend's).
constexpr int kPublisherShards = 32768;
constexpr uint32 kOperatorShards = 1024;

int16 MyShard() {
  if (InPublisher()) return static_cast<int16>(MyProcIndex() % kPublisherShards);
  const uint32 pick =
      hash_bytes_uint32(static_cast<uint32>(MyProcPid) * 2654435761U ^ MyLocalXid());
  return static_cast<int16>(-1 - static_cast<int>(pick % kOperatorShards));
}

constexpr const char kUpsertSql[] =
    "INSERT INTO outbox.counts AS c (day, topic, waiting, published, dead, shard)"
    " SELECT u.d, u.t, u.w, u.p, u.x, $6"
    " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
    " pg_catalog.unnest($4), pg_catalog.unnest($5)) AS u(d, t, w, p, x)"
    " ON CONFLICT (day, topic, shard) DO UPDATE"
    " SET waiting = c.waiting OPERATOR(pg_catalog.+) excluded.waiting,"
    " published = c.published OPERATOR(pg_catalog.+) excluded.published,"
    " dead = c.dead OPERATOR(pg_catalog.+) excluded.dead";
SPIPlanPtr upsert_plan = nullptr;

void Write(const Deltas &deltas, int groups) {
  Datum *days = static_cast<Datum *>(palloc(sizeof(Datum) * groups));
  Datum *topics = static_cast<Datum *>(palloc(sizeof(Datum) * groups));
  Datum *waiting = static_cast<Datum *>(palloc(sizeof(Datum) * groups));
  Datum *published = static_cast<Datum *>(palloc(sizeof(Datum) * groups));
  Datum *dead = static_cast<Datum *>(palloc(sizeof(Datum) * groups));
  for (int i = 0; i < groups; ++i) {
    const Delta &d = deltas.items[i];
    days[i] = DateADTGetDatum(d.day);
    topics[i] = PointerGetDatum(cstring_to_text_with_len(d.topic, d.topic_len));
    waiting[i] = Int64GetDatum(d.waiting);
    published[i] = Int64GetDatum(d.published);
    dead[i] = Int64GetDatum(d.dead);
  }
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  if (upsert_plan == nullptr) {
    Oid types[6] = {DATEARRAYOID, TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT2OID};
    SPIPlanPtr plan = SPI_prepare(kUpsertSql, 6, types);
    if (plan == nullptr || SPI_keepplan(plan) != 0) {
      elog(ERROR, "outbox: could not prepare the counts upsert");
    }
    upsert_plan = plan;
  }
  Datum args[6] = {
      PointerGetDatum(construct_array(days, groups, DATEOID, sizeof(DateADT), true, TYPALIGN_INT)),
      PointerGetDatum(construct_array(topics, groups, TEXTOID, -1, false, TYPALIGN_INT)),
      PointerGetDatum(
          construct_array(waiting, groups, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
      PointerGetDatum(
          construct_array(published, groups, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
      PointerGetDatum(construct_array(dead, groups, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)),
      Int16GetDatum(MyShard())};
  if (SPI_execute_plan(upsert_plan, args, nullptr, false, 0) != SPI_OK_INSERT) {
    elog(ERROR, "outbox: updating outbox.counts failed");
  }
  SPI_finish();
}

void Recount() {
  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "outbox: SPI_connect failed");
  if (SPI_execute("SELECT outbox.recount()", false, 0) != SPI_OK_SELECT) {
    elog(ERROR, "outbox: outbox.recount() failed");
  }
  SPI_finish();
}

}  // namespace
}  // namespace outbox

extern "C" {
PG_FUNCTION_INFO_V1(outbox_count_changes);
}

// No C++ object lives here and nothing throws: no exception boundary needed.
extern "C" Datum outbox_count_changes(PG_FUNCTION_ARGS) {
  using namespace outbox;
  if (!CALLED_AS_TRIGGER(fcinfo)) {
    ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                    errmsg("outbox.count_changes() may only be called as a trigger")));
  }
  TriggerData *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
  if (!TRIGGER_FIRED_FOR_STATEMENT(trigger->tg_event) || !TRIGGER_FIRED_AFTER(trigger->tg_event)) {
    ereport(ERROR,
            (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
             errmsg("outbox.count_changes() must be an AFTER ... FOR EACH STATEMENT trigger")));
  }
  if (TRIGGER_FIRED_BY_TRUNCATE(trigger->tg_event)) {
    Recount();
    return PointerGetDatum(nullptr);
  }
  TupleDesc desc = RelationGetDescr(trigger->tg_relation);
  Deltas deltas;
  if (TRIGGER_FIRED_BY_INSERT(trigger->tg_event) || TRIGGER_FIRED_BY_UPDATE(trigger->tg_event)) {
    Collect(trigger->tg_newtable, desc, +1, &deltas);
  }
  if (TRIGGER_FIRED_BY_UPDATE(trigger->tg_event) || TRIGGER_FIRED_BY_DELETE(trigger->tg_event)) {
    Collect(trigger->tg_oldtable, desc, -1, &deltas);
  }
  if (deltas.new_pending && !InPublisher()) ResetClaimFloorsAtCommit();
  const int groups = SumPerDayAndTopic(&deltas);
  if (groups > 0) Write(deltas, groups);
  return PointerGetDatum(nullptr);
}
