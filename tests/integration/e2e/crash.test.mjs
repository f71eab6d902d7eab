// kill -9 under load (crash.sh starts the server): 16 openai SDK clients of
// three keys in two teams send chat, completions and Responses requests,
// streamed and not, until the server is killed with SIGKILL in the middle of
// it; the server restarts on the same data dir; then every request a client
// saw complete (its usage arrived) has exactly one ledger entry, with the
// cost the client was shown, no request id has two, the counters equal the
// entries, and /admin/usage equals the sum of the entries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { openSync, readFileSync, writeFileSync } from 'node:fs';
import OpenAI from 'openai';
import { server as connect } from './server.mjs';

function pico(text) {
  const [whole, frac = ''] = text.split('.');
  return BigInt(whole) * 10n ** 12n + BigInt(frac.padEnd(12, '0'));
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const admin = () => ({ authorization: `Bearer ${process.env.LG_ADMIN_KEY}` });

async function restart() {
  const log = `${process.env.LG_DATA}/../restarted.log`;
  const out = openSync(log, 'w');
  const child = spawn(process.env.LG_BINARY, ['serve', '--data-dir', process.env.LG_DATA, '--listen', '127.0.0.1:0'], {
    env: { ...process.env, LATENTGATE_ADMIN_KEY: process.env.LG_ADMIN_KEY },
    stdio: ['ignore', out, out],
  });
  writeFileSync(process.env.LG_RESTART_PID_FILE, String(child.pid));
  for (let i = 0; i < 600; i++) {
    const m = readFileSync(log, 'utf8').match(/serving \S+ at (https:\/\/\S+)\/v1/);
    if (m) return { child, url: m[1] };
    if (child.exitCode !== null) throw new Error(`the restarted server exited: ${child.exitCode}`);
    await sleep(100);
  }
  throw new Error('the restarted server did not start');
}

async function adminGet(server, path) {
  const r = await server.request('GET', path, { headers: admin() });
  assert.equal(r.status, 200, `${path}: ${r.body}`);
  return JSON.parse(r.body);
}

test('every response a client saw complete survives kill -9 with exactly one entry', async () => {
  let server = connect();
  const keys = [];
  for (const [team, name] of [['crash-a', 'a1'], ['crash-a', 'a2'], ['crash-b', 'b1']]) {
    const key = await server.createKey(team, name);
    keys.push({ team, name, key, client: new OpenAI({ apiKey: key, baseURL: server.url + '/v1', maxRetries: 0 }) });
  }
  const system = 'You are a patient agent that must survive a crash. '.repeat(30);
  const seen = new Map();  // request id -> {key, responseId, cost (pico)}
  let inFlight = 0, killed = false, failedAfterKill = 0;

  async function one(i) {
    const k = keys[i % keys.length];
    const kind = i % 4;
    const messages = [{ role: 'system', content: system }, { role: 'user', content: `Step ${i % 7}` }];
    let requestId, responseId, usage;
    if (kind === 0) {
      const { data, response } = await k.client.chat.completions.create(
        { model: process.env.LG_MODEL, messages, max_tokens: 6 }).withResponse();
      requestId = response.headers.get('x-request-id');
      responseId = data.id;
      usage = data.usage;
    } else if (kind === 1) {
      const { data: stream, response } = await k.client.chat.completions.create(
        { model: process.env.LG_MODEL, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true } }).withResponse();
      requestId = response.headers.get('x-request-id');
      for await (const chunk of stream) {
        responseId = chunk.id;
        if (chunk.usage) usage = chunk.usage;
      }
    } else if (kind === 2) {
      const { data, response } = await k.client.completions.create(
        { model: process.env.LG_MODEL, prompt: [`Count ${i}`, 'Count on'], max_tokens: 5 }).withResponse();
      requestId = response.headers.get('x-request-id');
      responseId = data.id;
      usage = data.usage;
    } else {
      const { data: stream, response } = await k.client.responses.create(
        { model: process.env.LG_MODEL, instructions: system, input: `Task ${i}`, max_output_tokens: 16, stream: true, store: false }).withResponse();
      requestId = response.headers.get('x-request-id');
      for await (const ev of stream) {
        if (ev.type === 'response.completed' || ev.type === 'response.incomplete') {
          usage = ev.response.usage;
          responseId = ev.response.id;
        }
      }
    }
    // Only a response whose usage arrived was seen complete.
    if (usage) seen.set(requestId, { key: k, responseId, cost: pico(usage.cost.total) });
  }

  const workers = Array.from({ length: 16 }, async (_, w) => {
    for (let i = w; !killed; i += 16) {
      inFlight++;
      try {
        await one(i);
      } catch (e) {
        if (!killed) throw e;
        failedAfterKill++;
      } finally {
        inFlight--;
      }
    }
  });
  // Kill in the middle of the load, with requests in flight.
  const target = Number(process.env.LG_CRASH_AFTER ?? 150);
  while (seen.size < target) await sleep(5);
  const inFlightAtKill = inFlight;
  killed = true;
  process.kill(Number(process.env.LG_SERVER_PID), 'SIGKILL');
  await Promise.all(workers);
  assert.ok(inFlightAtKill > 0);

  const { child, url } = await restart();
  try {
    process.env.LG_URL = url;
    server = connect();
    // Every response seen complete: exactly one entry, with the cost shown.
    for (const [requestId, s] of seen) {
      const found = await adminGet(server, `/admin/ledger?request_id=${requestId}`);
      assert.equal(found.data.length, 1, `an entry for ${requestId}`);
      const e = found.data[0];
      assert.equal(e.status, 'completed');
      assert.equal(e.response_id, s.responseId);
      assert.equal(e.key_id, (await keyId(server, s.key)));
      assert.equal(BigInt(e.cost.input_cache_hit) + BigInt(e.cost.input_cache_miss) + BigInt(e.cost.output), s.cost);
    }
    // Nothing twice; the rest are requests in flight at the kill whose
    // entries were committed before the client read the end.
    const ids = new Set();
    const perKey = new Map();
    let after = '';
    for (;;) {
      const page = await adminGet(server, `/admin/ledger?from=0&limit=500${after ? `&after=${after}` : ''}`);
      for (const e of page.data) {
        assert.ok(!ids.has(e.request_id), `${e.request_id} twice`);
        ids.add(e.request_id);
        const total = BigInt(e.cost.input_cache_hit) + BigInt(e.cost.input_cache_miss) + BigInt(e.cost.output);
        perKey.set(e.key_id, (perKey.get(e.key_id) ?? 0n) + total);
      }
      if (!page.has_more) break;
      after = encodeURIComponent(page.next);
    }
    for (const id of seen.keys()) assert.ok(ids.has(id));
    const unseen = ids.size - seen.size;
    assert.ok(unseen <= inFlightAtKill, `${unseen} entries beyond those seen, ${inFlightAtKill} requests were in flight`);
    // The counters equal the entries, and the usage API their sums.
    const verify = await adminGet(server, '/admin/ledger/verify');
    assert.ok(verify.ok, JSON.stringify(verify.mismatches));
    assert.equal(verify.entries, ids.size);
    const usage = await adminGet(server, '/admin/usage?group_by=key&from=0');
    for (const row of usage.data) assert.equal(pico(row.cost_total), perKey.get(row.key_id) ?? 0n, row.key_id);
    assert.equal(usage.data.length, perKey.size);
    // And the restarted server serves and bills on.
    const client = new OpenAI({ apiKey: keys[0].key, baseURL: url + '/v1', maxRetries: 0 });
    const r = await client.chat.completions.create({ model: process.env.LG_MODEL, messages: [{ role: 'user', content: 'Again' }], max_tokens: 3 });
    assert.ok(pico(r.usage.cost.total) > 0n);
    console.log(`crash e2e: killed with ${inFlightAtKill} requests in flight after ${seen.size} were seen complete; ` +
                `${ids.size} entries after restart (${unseen} committed but not seen, ${failedAfterKill} requests cut off)`);
  } finally {
    child.kill('SIGTERM');
  }
});

const keyIds = new Map();
async function keyId(server, k) {
  if (!keyIds.has(k.name)) {
    const listed = await adminGet(server, '/admin/keys');
    for (const d of listed.data) keyIds.set(d.name, d.id);
  }
  return keyIds.get(k.name);
}
