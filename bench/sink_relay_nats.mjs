// bench/sink_relay_nats.mjs -- the polling relay of bench/relay.py's design,
// into NATS JetStream, written with the `nats` npm package (and `pg`,
// node-postgres), both installed pinned by bench/install_node_tools.sh.
//
// Every INTERVAL ms, in one transaction: claim up to BATCH unsent rows of
// relay_outbox with FOR UPDATE SKIP LOCKED, publish every one to JetStream
// (js.publish, all of the batch at once, each with Nats-Msg-Id = the row's
// id as outbox does) and wait for every PubAck, mark them sent, commit. A
// full claim is followed by the next at once. A batch with any publish
// refused or unacknowledged is rolled back and claimed again.
//
//   node sink_relay_nats.mjs SERVER SUBJECT [INTERVAL_MS=50] [BATCH=500]
//
// The database is reached through PGHOST, PGPORT, PGUSER and PGDATABASE
// (node-postgres reads them); the NATS user and password come from
// OUTBOX_BENCH_NATS_USER and OUTBOX_BENCH_NATS_PASSWORD. Runs until SIGTERM
// or SIGINT; prints "relay: N rows sent" when it stops.
import { createRequire } from 'node:module';
import path from 'node:path';

const tools = process.env.OUTBOX_BENCH_NODE_TOOLS
  || path.join(path.dirname(new URL(import.meta.url).pathname), 'node_tools');
const require = createRequire(path.join(tools, 'package.json'));
const { connect } = require('nats');
const pg = require('pg');

const [server, subject] = process.argv.slice(2, 4);
const interval = Number(process.argv[4] ?? 50);
const batch = Number(process.argv[5] ?? 500);
const CLAIM = 'SELECT id, payload::text AS payload FROM relay_outbox'
  + ' WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED';
const MARK = 'UPDATE relay_outbox SET sent_at = clock_timestamp() WHERE id = ANY($1::bigint[])';

let stop = false;
let wake = null;
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => { stop = true; if (wake) wake(); });
}
const pause = (ms) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  wake = () => { clearTimeout(timer); resolve(); };
});

const nc = await connect({
  servers: server,
  user: process.env.OUTBOX_BENCH_NATS_USER,
  pass: process.env.OUTBOX_BENCH_NATS_PASSWORD,
});
const js = nc.jetstream();
const db = new pg.Client();
await db.connect();
const encoder = new TextEncoder();

let sent = 0;
let nextTick = performance.now();
while (!stop) {
  await db.query('BEGIN');
  const { rows } = await db.query(CLAIM, [batch]);
  if (rows.length > 0) {
    try {
      // Every publish resolves with its PubAck or rejects (no stream, a
      // timeout, a refusal): all must resolve before the batch is marked.
      await Promise.all(rows.map((row) => js.publish(subject, encoder.encode(row.payload),
        { msgID: String(row.id), timeout: 30000 })));
    } catch (e) {
      await db.query('ROLLBACK');
      console.error(`relay: batch not delivered: ${e.message}`);
      await pause(1000);
      continue;
    }
    await db.query(MARK, [rows.map((row) => row.id)]);
    sent += rows.length;
  }
  await db.query('COMMIT');
  if (rows.length === batch) continue; // a backlog: claim the next batch at once
  nextTick += interval;
  const delay = nextTick - performance.now();
  if (delay > 0) await pause(delay);
  else nextTick = performance.now();
}
console.log(`relay: ${sent} rows sent`);
await db.end();
await nc.close();
