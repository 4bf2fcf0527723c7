// A webhook receiver over TLS that offers HTTP/2 (ALPN h2, HTTP/1.1 too),
// for the TAP tests of the HTTP sink's TLS and HTTP/2 (OutboxHttp->start_tls).
// Node's own http2 module: no package to install.
//
//   node h2_receiver.js PORT DIR
//
// DIR holds server.key and server.pem (made by the test), and receives
// received.jsonl (one JSON object per request: path, headers, body, status,
// at, version, connection, concurrent) and, once it listens, ready. Each
// request is answered 200 after DELAY_MS (default 30 ms), so that requests
// sent at once overlap and "concurrent" (requests open on the same
// connection at that moment, this one included) shows whether they shared
// one connection.
'use strict';
const fs = require('fs');
const http2 = require('http2');
const path = require('path');

const [port, dir] = process.argv.slice(2);
const delayMs = Number(process.env.DELAY_MS || 30);
const record = path.join(dir, 'received.jsonl');
let connections = 0;
const open = new Map();  // connection id -> requests open on it

function connectionOf(req) {
  // HTTP/2: the session; HTTP/1.1: the socket. Either gets an id once.
  const holder = req.stream ? req.stream.session : req.socket;
  if (holder.outboxId === undefined) holder.outboxId = ++connections;
  return holder.outboxId;
}

const server = http2.createSecureServer({
  key: fs.readFileSync(path.join(dir, 'server.key')),
  cert: fs.readFileSync(path.join(dir, 'server.pem')),
  allowHTTP1: true,
});
server.on('request', (req, res) => {
  const connection = connectionOf(req);
  open.set(connection, (open.get(connection) || 0) + 1);
  const concurrent = open.get(connection);
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    setTimeout(() => {
      const headers = {};
      for (const [name, value] of Object.entries(req.headers)) {
        if (!name.startsWith(':')) headers[name] = value;
      }
      fs.appendFileSync(record, JSON.stringify({
        path: req.url, headers, body: Buffer.concat(chunks).toString('utf8'), status: 200,
        at: Date.now() / 1000, version: req.httpVersion, connection, concurrent,
      }) + '\n');
      open.set(connection, open.get(connection) - 1);
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok');
    }, delayMs);
  });
});
server.listen(Number(port), '127.0.0.1', () => {
  fs.writeFileSync(path.join(dir, 'ready'), 'ready\n');
});
