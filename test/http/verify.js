// Checks what the receiver recorded with the reference libraries, not with
// outbox's own code: each request's Standard Webhooks signature (npm
// standardwebhooks) and, for CloudEvents, what the CloudEvents SDK's HTTP
// binding reads from it (npm cloudevents).
//
//   node verify.js NODE_TOOLS_DIR RECEIVED_JSONL [SECRET]
//
// Prints one JSON line per recorded request: {"path", "webhook_id",
// "signature": "valid" | "invalid: ..." | "none", "cloudevent": {...} |
// null, "cloudevent_error": "..." | null}.
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const [toolsDir, receivedFile, secret] = process.argv.slice(2);
const load = createRequire(path.join(path.resolve(toolsDir), 'package.json'));
const { Webhook } = load('standardwebhooks');
const { HTTP } = load('cloudevents');

const hook = secret ? new Webhook(secret) : null;
for (const line of fs.readFileSync(receivedFile, 'utf8').split('\n')) {
  if (!line) continue;
  const r = JSON.parse(line);
  const out = { path: r.path, webhook_id: r.headers['webhook-id'] || null, status: r.status,
                signature: 'none', cloudevent: null, cloudevent_error: null };
  if (hook) {
    try {
      hook.verify(r.body, r.headers);
      out.signature = 'valid';
    } catch (e) {
      out.signature = 'invalid: ' + e.message;
    }
  }
  const type = r.headers['content-type'] || '';
  if (r.headers['ce-id'] || type.startsWith('application/cloudevents+json')) {
    try {
      const ev = HTTP.toEvent({ headers: r.headers, body: r.body });
      const e = Array.isArray(ev) ? ev[0] : ev;
      out.cloudevent = JSON.parse(JSON.stringify(e));
    } catch (e) {
      out.cloudevent_error = String(e && e.message || e);
    }
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}
