// Billing end to end (docs/billing.md): a few hundred mixed requests from the
// official openai SDK over TLS (cache hits and misses, chat, completions and
// Responses, streamed and not, streams aborted mid-way, errors), three keys in
// two teams, and a price change in the middle. The usage.cost the clients
// received, plus what the ledger billed for the streams they abandoned,
// equals /admin/usage per key and per team to the pico-dollar, and every cost
// equals a recomputation from the token counts and the prices in force.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { server as connect } from './server.mjs';

let server;
const admin = () => ({ authorization: `Bearer ${process.env.LG_ADMIN_KEY}`, 'content-type': 'application/json' });
const tag = randomBytes(4).toString('hex');

// Exact decimal dollars -> BigInt pico-dollars.
function pico(text) {
  assert.match(text, /^-?\d+(\.\d{1,12})?$/, `not an exact decimal: ${text}`);
  const [whole, frac = ''] = text.split('.');
  return BigInt(whole) * 10n ** 12n + BigInt(frac.padEnd(12, '0'));
}
// USD per 1M tokens (decimal string) -> BigInt pico-dollars per token.
const rate = (perMillion) => pico(perMillion) / 1_000_000n;

async function adminGet(path) {
  const r = await server.request('GET', path, { headers: admin() });
  assert.equal(r.status, 200, `${path}: ${r.body}`);
  return JSON.parse(r.body);
}

async function putPrices(prices) {
  const r = await server.request('PUT', '/admin/pricing', { headers: admin(), body: { prices } });
  assert.equal(r.status, 200, r.body);
  return JSON.parse(r.body);
}

let pricesBefore;
before(async () => {
  server = connect();
  pricesBefore = (await adminGet('/admin/pricing')).in_force.prices;
});
after(async () => {
  // Later tests in this server see the prices it started with again.
  if (pricesBefore && Object.keys(pricesBefore).length) await putPrices(pricesBefore);
  else await putPrices({ '*': { input_cache_hit: '0.028', input_cache_miss: '0.28', output: '0.42' } });
});

// A run of `n` jobs, `width` at a time.
async function pool(n, width, job) {
  let next = 0;
  const results = [];
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++;
      results[i] = await job(i);
    }
  }));
  return results;
}

test('the cost clients see equals the ledger and a recomputation, across a price change', async () => {
  const teams = [`bill-x-${tag}`, `bill-y-${tag}`];
  const keys = [];
  for (const [team, name] of [[teams[0], 'x1'], [teams[0], 'x2'], [teams[1], 'y1']]) {
    const key = await server.createKey(team, name);
    keys.push({ team, name, key, client: new OpenAI({ apiKey: key, baseURL: server.url + '/v1', maxRetries: 0 }) });
  }
  const listed = await adminGet('/admin/keys');
  for (const k of keys) k.id = listed.data.find((d) => d.team === k.team && d.name === k.name).id;

  // Phase 1 prices, then phase 2 prices with a time window that covers now
  // (so the window's rates are the ones that apply).
  const p1 = { input_cache_hit: '0.028', input_cache_miss: '0.28', output: '0.42' };
  const now = new Date();
  const minute = now.getUTCHours() * 60 + now.getUTCMinutes();
  const hhmm = (m) => `${String(Math.floor(((m + 1440) % 1440) / 60)).padStart(2, '0')}:${String(((m + 1440) % 1440) % 60).padStart(2, '0')}`;
  const p2 = {
    input_cache_hit: '0.07', input_cache_miss: '0.27', output: '1.1',
    windows: [{ start: hhmm(minute - 120), end: hhmm(minute + 120), input_cache_hit: '0.0123', input_cache_miss: '0.456789', output: '0.999999' }],
  };
  const p2Effective = { input_cache_hit: '0.0123', input_cache_miss: '0.456789', output: '0.999999' };
  const phases = [];
  phases.push({ version: (await putPrices({ '*': p1 })).version, prices: p1 });

  const system = (k) => `You are billing test agent ${k % 3}. Answer with care and cite your sources. `.repeat(40);
  const seen = [];      // responses that carried usage: {key, phase, usage}
  const aborted = [];   // streams the client abandoned: {key, phase, requestId}
  let errors = 0;

  async function one(i, phase) {
    const k = keys[i % keys.length];
    const kind = i % 9;
    const max_tokens = 3 + (i % 5);
    const messages = [{ role: 'system', content: system(i) }, { role: 'user', content: `Question ${i % 4}` }];
    const note = (usage) => seen.push({ key: k, phase, usage });
    if (kind === 0 || kind === 1) {
      const r = await k.client.chat.completions.create({ model: 'deepseek-chat', messages, max_tokens, temperature: 0 });
      return note(r.usage);
    }
    if (kind === 2) {
      const stream = await k.client.chat.completions.create({
        model: server.model, messages, max_tokens, stream: true, stream_options: { include_usage: true },
      });
      let usage = null;
      for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
      return note(usage);
    }
    if (kind === 3) {
      const r = await k.client.completions.create({ model: server.model, prompt: [`Count ${i}`, `Count ${i + 1}`], max_tokens });
      return note(r.usage);
    }
    if (kind === 4) {
      const r = await k.client.responses.create({ model: server.model, instructions: system(i), input: `Task ${i % 3}`,
        max_output_tokens: 16, store: false });
      return note(r.usage);
    }
    if (kind === 5) {
      const stream = await k.client.responses.create({ model: server.model, input: `Stream ${i}`, max_output_tokens: 16,
        stream: true, store: false });
      let usage = null;
      for await (const ev of stream) if (ev.type === 'response.completed' || ev.type === 'response.incomplete') usage = ev.response.usage;
      return note(usage);
    }
    if (kind === 6) {
      // Abandoned mid-stream: the client sees no usage; the ledger bills
      // what was computed (cancelled), or all of it when the reply had
      // already finished.
      const controller = new AbortController();
      const { data: stream, response } = await k.client.chat.completions.create({
        model: server.model, messages, max_tokens: 200, stream: true, stream_options: { include_usage: true },
      }, { signal: controller.signal }).withResponse();
      // Looked up in the ledger whether or not the abort came in time (a
      // reply that ended first was billed in full, its usage unseen).
      aborted.push({ key: k, phase, requestId: response.headers.get('x-request-id') });
      try {
        for await (const chunk of stream) {
          if (chunk.choices[0]?.delta?.content) controller.abort();
        }
      } catch (e) {
        if (!String(e?.name + e?.message).match(/abort/i)) throw e;
      }
      return;
    }
    if (kind === 7) {
      // Errors before any work: no usage, no entry.
      await assert.rejects(k.client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 2 }), { status: 404 });
      await assert.rejects(k.client.chat.completions.create({ model: server.model, messages, max_tokens: 2, temperature: 9 }), { status: 400 });
      errors += 2;
      return;
    }
    const r = await k.client.chat.completions.create({
      model: server.model, messages: [{ role: 'user', content: `Plain ${i}` }], max_tokens, temperature: 0,
    });
    return note(r.usage);
  }

  const perPhase = Number(process.env.LG_BILLING_REQUESTS ?? 135);
  await pool(perPhase, 8, (i) => one(i, 0));
  phases.push({ version: (await putPrices({ '*': p2 })).version, prices: p2Effective });
  await pool(perPhase, 8, (i) => one(i + perPhase, 1));
  assert.ok(seen.length >= perPhase, `${seen.length} responses with usage`);
  assert.ok(errors > 0);

  // Every usage.cost is exact and equals tokens x the phase's rates.
  let hits = 0;
  const expect = new Map();  // key id / team -> BigInt pico
  const add = (name, v) => expect.set(name, (expect.get(name) ?? 0n) + v);
  for (const { key, phase, usage } of seen) {
    assert.ok(usage && usage.cost, 'usage.cost is present');
    const hit = BigInt(usage.prompt_cache_hit_tokens ?? usage.input_tokens_details.cached_tokens);
    const prompt = BigInt(usage.prompt_tokens ?? usage.input_tokens);
    const out = BigInt(usage.completion_tokens ?? usage.output_tokens);
    const p = phases[phase].prices;
    const c = usage.cost;
    assert.equal(c.currency, 'USD');
    assert.equal(pico(c.input_cache_hit), hit * rate(p.input_cache_hit));
    assert.equal(pico(c.input_cache_miss), (prompt - hit) * rate(p.input_cache_miss));
    assert.equal(pico(c.output), out * rate(p.output));
    assert.equal(pico(c.total), pico(c.input_cache_hit) + pico(c.input_cache_miss) + pico(c.output));
    if (hit > 0n) hits++;
    add(key.id, pico(c.total));
    add(key.team, pico(c.total));
  }
  assert.ok(hits > 20, `${hits} responses hit the cache`);

  // Abandoned streams: exactly one entry each, billed for what it computed.
  let cancelled = 0;
  const byVersion = new Map(phases.map((p) => [p.version, p.prices]));
  for (const { key, phase, requestId } of aborted) {
    // The server cancels within an engine step of the disconnect and commits.
    let found;
    for (let tries = 0; tries < 100; tries++) {
      found = await adminGet(`/admin/ledger?request_id=${requestId}`);
      if (found.data.length) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(found.data.length, 1, `an entry for ${requestId}`);
    const e = found.data[0];
    assert.ok(['cancelled', 'completed'].includes(e.status), e.status);
    assert.equal(e.price_version, phases[phase].version);
    const p = byVersion.get(e.price_version);
    const hit = BigInt(e.hit_tokens_tier0 + e.hit_tokens_disk);
    assert.equal(BigInt(e.cost.input_cache_hit), hit * rate(p.input_cache_hit));
    assert.equal(BigInt(e.cost.input_cache_miss), BigInt(e.miss_tokens) * rate(p.input_cache_miss));
    assert.equal(BigInt(e.cost.output), BigInt(e.output_tokens) * rate(p.output));
    if (e.status === 'cancelled') cancelled++;
    const total = BigInt(e.cost.input_cache_hit) + BigInt(e.cost.input_cache_miss) + BigInt(e.cost.output);
    add(key.id, total);
    add(key.team, total);
  }
  assert.ok(cancelled > 0, 'some streams were cancelled mid-way');

  // The ledger's totals per key and per team equal what clients were billed.
  const byKey = await adminGet('/admin/usage?group_by=key&from=0');
  for (const k of keys) {
    const row = byKey.data.find((r) => r.key_id === k.id);
    assert.ok(row, `a usage row for ${k.id}`);
    assert.equal(row.team, k.team);
    assert.equal(pico(row.cost_total), expect.get(k.id), `key ${k.id}`);
    assert.equal(row.prompt_cache_hit_tokens + row.prompt_cache_miss_tokens, row.prompt_tokens);
  }
  const byTeam = await adminGet('/admin/usage?group_by=team&from=0');
  for (const team of teams) {
    const row = byTeam.data.find((r) => r.team === team);
    assert.equal(pico(row.cost_total), expect.get(team), `team ${team}`);
    const completed = seen.filter((s) => s.key.team === team).length;
    const abandoned = aborted.filter((a) => a.key.team === team).length;
    assert.equal(row.requests, completed + abandoned, 'one entry per request that ran, none for errors');
  }
  // Per day, per hour and as CSV: the same totals.
  const daily = await adminGet(`/admin/usage?group_by=team&from=0&granularity=day&team=${teams[1]}`);
  assert.equal(daily.data.reduce((s, r) => s + pico(r.cost_total), 0n), expect.get(teams[1]));
  const csv = await server.request('GET', `/admin/usage.csv?group_by=key&from=0&team=${teams[0]}`, { headers: admin() });
  assert.equal(csv.status, 200);
  const [header, ...lines] = csv.body.trim().split('\r\n');
  const cols = header.split(',');
  assert.equal(lines.length, 2);
  for (const line of lines) {
    const cells = line.split(',');
    const id = cells[cols.indexOf('key_id')];
    assert.equal(pico(cells[cols.indexOf('cost_total')]), expect.get(id));
  }
  // A key sees its own usage, and a balance in DeepSeek's shape.
  const own = JSON.parse((await server.request('GET', '/v1/usage?from=0', { headers: { authorization: `Bearer ${keys[2].key}` } })).body);
  assert.equal(own.key_id, keys[2].id);
  assert.equal(pico(own.totals.cost_total), expect.get(keys[2].id));
  assert.equal(own.budget, null);
  const balance = await server.request('GET', '/user/balance', { headers: { authorization: `Bearer ${keys[0].key}` } });
  const b = JSON.parse(balance.body);
  assert.equal(b.is_available, true);
  assert.equal(b.balance_infos[0].currency, 'USD');
  // System prompts: the team's agents' fingerprints, and the requests without one.
  const prompts = await adminGet(`/admin/usage?group_by=system_prompt&from=0&team=${teams[0]}`);
  assert.ok(prompts.data.filter((r) => r.system_prompt).length >= 2);
  assert.ok(prompts.data.some((r) => r.system_prompt === null));
  assert.equal(prompts.data.reduce((s, r) => s + pico(r.cost_total), 0n), expect.get(teams[0]));
  // And the counters equal the entries.
  const verify = await adminGet('/admin/ledger/verify');
  assert.ok(verify.ok, JSON.stringify(verify.mismatches));
  const stats = await adminGet('/admin/ledger/stats');
  console.log(`billing e2e: ${seen.length} responses with usage, ${aborted.length} abandoned (${cancelled} cancelled), ` +
              `${errors} errors; ledger ${stats.entries} entries in ${stats.batches} synced writes, commit p50 ` +
              `${stats.commit_ms.p50.toFixed(2)} ms p99 ${stats.commit_ms.p99.toFixed(2)} ms`);
});

test('an Idempotency-Key bills a request once and replays its response', async () => {
  const key = await server.createKey(`bill-idem-${tag}`, 'idem');
  const client = new OpenAI({ apiKey: key, baseURL: server.url + '/v1', maxRetries: 0 });
  const body = { model: server.model, messages: [{ role: 'user', content: 'Once' }], max_tokens: 4 };
  const idem = `idem-${tag}`;
  const first = await client.chat.completions.create(body, { headers: { 'Idempotency-Key': idem } }).withResponse();
  const again = await client.chat.completions.create(body, { headers: { 'Idempotency-Key': idem } }).withResponse();
  assert.deepEqual(again.data, first.data);
  assert.equal(again.response.headers.get('x-latentgate-idempotent-replay'), first.response.headers.get('x-request-id'));
  // The same key with another body is refused.
  await assert.rejects(client.chat.completions.create({ ...body, max_tokens: 5 }, { headers: { 'Idempotency-Key': idem } }),
    { status: 400, code: 'idempotency_key_reused' });
  // Streams replay their events.
  const sbody = { ...body, stream: true, stream_options: { include_usage: true } };
  const collect = async (s) => { const out = []; for await (const c of s) out.push(c); return out; };
  const s1 = await collect(await client.chat.completions.create(sbody, { headers: { 'Idempotency-Key': idem + 's' } }));
  const s2 = await collect(await client.chat.completions.create(sbody, { headers: { 'Idempotency-Key': idem + 's' } }));
  assert.deepEqual(s2, s1);
  // Sent together: one runs; the other is told it is in flight (409) or,
  // arriving after the first finished, gets its replay.
  const cbody = { ...body, messages: [{ role: 'user', content: 'Concurrent' }], max_tokens: 8 };
  const both = await Promise.allSettled([0, 1].map(() =>
    client.chat.completions.create(cbody, { headers: { 'Idempotency-Key': idem + 'c' } })));
  const fulfilled = both.filter((r) => r.status === 'fulfilled');
  assert.ok(fulfilled.length >= 1);
  for (const r of both) if (r.status === 'rejected') assert.equal(r.reason.status, 409);
  if (fulfilled.length === 2) assert.deepEqual(fulfilled[1].value, fulfilled[0].value);
  const usage = await adminGet(`/admin/usage?group_by=key&from=0&team=bill-idem-${tag}`);
  assert.equal(usage.data[0].requests, 3, 'three requests ran, six were answered');
  assert.equal(pico(usage.data[0].cost_total), pico(first.data.usage.cost.total) + pico(s1.at(-1).usage.cost.total) +
                                                pico(fulfilled[0].value.usage.cost.total));
});
