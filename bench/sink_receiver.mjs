// bench/sink_receiver.mjs -- the webhook receiver of bench/sink_drain and
// bench/sink_latency: Node's own http module, answers 204 to every POST once
// its body has arrived, logs nothing, and counts per path the requests and
// the distinct webhook-id values it saw, so that a benchmark can check that
// every event arrived exactly as many times as it was sent. Faster than
// test/http/receiver.py (which writes a JSON line per request) so that the
// receiver is not what a drain measures: bench/sink_drain measures it with
// wrk before the drains and prints the figure.
//
//   node sink_receiver.mjs PORT
//
// GET /_ready answers 200; GET /_count answers
// {"/path": {"requests": N, "distinct": M}, ...}; neither is counted.
import http from 'node:http';

const port = Number(process.argv[2]);
const seen = new Map(); // path -> { requests, ids: Set }

const server = http.createServer((req, res) => {
  if (req.method === 'GET') {
    if (req.url === '/_count') {
      const out = {};
      for (const [p, s] of seen) out[p] = { requests: s.requests, distinct: s.ids.size };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(out));
    } else {
      res.writeHead(200);
      res.end('ready');
    }
    return;
  }
  // Only the body's end matters; its bytes are not kept.
  req.on('data', () => {});
  req.on('end', () => {
    let s = seen.get(req.url);
    if (!s) { s = { requests: 0, ids: new Set() }; seen.set(req.url, s); }
    s.requests++;
    const id = req.headers['webhook-id'];
    if (id) s.ids.add(id);
    res.writeHead(204);
    res.end();
  });
});
server.keepAliveTimeout = 60000;
server.listen(port, '127.0.0.1');
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
