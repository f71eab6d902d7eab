// Budgets end to end (docs/billing.md, "Budgets"): the official openai SDK
// over TLS against latentgate serve. 64 concurrent requests (half of them
// streams) against a key whose budget holds only some of their reservations
// never spend past it; a team's budget binds its keys together; refusals are
// 429 insufficient_quota that the SDK does not retry; what was spent equals
// the usage.cost the clients received and /admin/usage; the soft limit shows
// in /metrics; the admin API refuses bad input and non-admin keys.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { server as connect } from './server.mjs';

let server;
const admin = () => ({ authorization: `Bearer ${process.env.LG_ADMIN_KEY}`, 'content-type': 'application/json' });
const tag = randomBytes(4).toString('hex');
const RATES = { input_cache_hit: '0.028', input_cache_miss: '0.28', output: '0.42' };  // USD per 1M tokens
const MAX_TOKENS = 64;

// Exact decimal dollars <-> BigInt pico-dollars.
function pico(text) {
  assert.match(text, /^-?\d+(\.\d{1,12})?$/, `not an exact decimal: ${text}`);
  const [whole, frac = ''] = text.split('.');
  return BigInt(whole) * 10n ** 12n + BigInt(frac.padEnd(12, '0'));
}
function dollars(p) {
  const s = p.toString().padStart(13, '0');
  return `${s.slice(0, -12)}.${s.slice(-12)}`;
}
const rate = (perMillion) => pico(perMillion) / 1_000_000n;

async function call(method, path, body, headers = admin()) {
  const r = await server.request(method, path, { headers, body });
  const isJson = (r.headers['content-type'] || '').startsWith('application/json');
  return { status: r.status, headers: r.headers, json: isJson ? JSON.parse(r.body) : null, body: r.body };
}

async function newKey(team, name) {
  const key = await server.createKey(team, name);
  const listed = await call('GET', '/admin/keys');
  const id = listed.json.data.find((d) => d.team === team && d.name === name).id;
  return { key, id, client: new OpenAI({ apiKey: key, baseURL: server.url + '/v1', maxRetries: 2 }) };
}

let pricesBefore;
before(async () => {
  server = connect();
  pricesBefore = (await call('GET', '/admin/pricing')).json.in_force.prices;
  // Known rates with no time windows, so the test can compute a reservation.
  const r = await call('PUT', '/admin/pricing', { prices: { '*': RATES } });
  assert.equal(r.status, 200, r.body);
});
after(async () => {
  await call('PUT', '/admin/pricing', { prices: Object.keys(pricesBefore).length ? pricesBefore : { '*': RATES } });
});

const messages = (i) => [{ role: 'user', content: `Budget test ${tag}: say something about the number ${i % 7}.` }];

// One request, streamed or not: {status: 200, cost} or {status, error}.
async function ask(client, i, stream) {
  try {
    if (!stream) {
      const r = await client.chat.completions.create({ model: server.model, messages: messages(i), max_tokens: MAX_TOKENS });
      return { status: 200, cost: pico(r.usage.cost.total), usage: r.usage };
    }
    const s = await client.chat.completions.create({
      model: server.model, messages: messages(i), max_tokens: MAX_TOKENS, stream: true, stream_options: { include_usage: true },
    });
    let usage;
    for await (const chunk of s) if (chunk.usage) usage = chunk.usage;
    return { status: 200, cost: pico(usage.cost.total), usage };
  } catch (e) {
    return { status: e.status, error: e.error, headers: e.headers };
  }
}

// The most one of these requests can cost: its prompt at the miss rate (the
// higher one) and max_tokens at the output rate, as the gateway reserves it.
async function reservationOf() {
  const probe = await newKey(`budget-probe-${tag}`, 'probe');
  const r = await probe.client.chat.completions.create({ model: server.model, messages: messages(0), max_tokens: 1 });
  return BigInt(r.usage.prompt_tokens) * rate(RATES.input_cache_miss) + BigInt(MAX_TOKENS) * rate(RATES.output);
}

function metricValue(text, series) {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

test('64 concurrent requests never spend past a key budget that holds only some of them', async () => {
  const reservation = await reservationOf();
  const k = await newKey(`budget-a-${tag}`, 'a1');
  // Room for 12 reservations at once; the soft limit at one.
  const limit = reservation * 12n + reservation / 2n;
  const put = await call('PUT', `/admin/budgets/keys/${k.id}`, { limit: dollars(limit), period: 'day', soft_limit: dollars(reservation) });
  assert.equal(put.status, 200, put.body);
  assert.equal(put.json.source, 'own');
  assert.equal(put.json.status.spent, '0');
  const metricsBefore = (await call('GET', '/metrics')).body;

  const results = await Promise.all(Array.from({ length: 64 }, (_, i) => ask(k.client, i, i % 2 === 1)));
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status !== 200);
  const spent = ok.reduce((a, r) => a + r.cost, 0n);
  assert.ok(ok.length >= 12, `at least the 12 reservations that fit were admitted, got ${ok.length}`);
  assert.ok(refused.length > 0, 'some requests were refused');
  assert.ok(spent <= limit, `spent ${dollars(spent)} within the budget ${dollars(limit)}`);
  for (const r of ok) assert.ok(r.cost <= reservation, 'no request costs more than its reservation');
  for (const r of refused) {
    assert.equal(r.status, 429);
    assert.equal(r.error.type, 'insufficient_quota');
    assert.equal(r.error.code, 'insufficient_quota');
    assert.match(r.error.message, /this API key's daily budget of \$/);
    assert.equal(r.headers.get('x-should-retry'), 'false');
  }

  // What the budget counts as spent is what the clients were told, and what the ledger holds.
  const usage = await call('GET', '/v1/usage', undefined, { authorization: `Bearer ${k.key}` });
  assert.equal(usage.status, 200, usage.body);
  assert.equal(usage.json.budget.scope, 'key');
  assert.equal(usage.json.budget.period, 'day');
  assert.equal(pico(usage.json.budget.spent), spent);
  assert.equal(usage.json.budget.reserved, '0');
  assert.equal(pico(usage.json.budget.remaining), limit - spent);
  assert.equal(pico(usage.json.totals.cost_total), spent);
  const byKey = await call('GET', `/admin/usage?group_by=key&key_id=${k.id}&from=${Math.floor(Date.now() / 1000) - 86400}`);
  assert.equal(byKey.status, 200, byKey.body);
  assert.equal(pico(byKey.json.totals.cost_total), spent);
  assert.equal(byKey.json.totals.completed_requests, ok.length, 'refused requests have no entry');
  const balance = await call('GET', '/user/balance', undefined, { authorization: `Bearer ${k.key}` });
  assert.equal(balance.json.is_available, limit - spent > 0n);

  // The soft limit (one reservation) was reached once.
  const metricsAfter = (await call('GET', '/metrics')).body;
  const series = 'latentgate_budget_soft_limit_reached_total{scope="key"}';
  assert.equal(metricValue(metricsAfter, series) - metricValue(metricsBefore, series), 1);
  // One refusal per refused request: the SDK (maxRetries 2) did not retry them.
  const refusals = 'latentgate_budget_refusals_total{scope="key"}';
  assert.equal(metricValue(metricsAfter, refusals) - metricValue(metricsBefore, refusals), refused.length);
});

test('a team budget binds all of its keys together', async () => {
  const reservation = await reservationOf();
  const team = `budget-t-${tag}`;
  const keys = [await newKey(team, 't1'), await newKey(team, 't2')];
  const other = await newKey(`budget-u-${tag}`, 'u1');
  const limit = reservation * 6n;
  assert.equal((await call('PUT', `/admin/budgets/teams/${team}`, { limit: dollars(limit), period: 'total' })).status, 200);
  const results = await Promise.all(Array.from({ length: 32 }, (_, i) => ask(keys[i % 2].client, i, i % 4 === 0)));
  const ok = results.filter((r) => r.status === 200);
  const spent = ok.reduce((a, r) => a + r.cost, 0n);
  assert.ok(ok.length >= 6 && ok.length < 32, `admitted ${ok.length}`);
  assert.ok(spent <= limit);
  for (const r of results.filter((x) => x.status !== 200)) {
    assert.equal(r.error.code, 'insufficient_quota');
    assert.match(r.error.message, new RegExp(`team ${team}'s total budget`));
  }
  const state = await call('GET', `/admin/budgets/teams/${team}`);
  assert.equal(state.status, 200, state.body);
  assert.equal(pico(state.json.status.spent), spent);
  assert.equal(state.json.status.period_end, null);
  const byTeam = await call('GET', `/admin/usage?group_by=team&team=${team}&from=${Math.floor(Date.now() / 1000) - 86400}`);
  assert.equal(pico(byTeam.json.totals.cost_total), spent);
  // Another team is not limited by it.
  assert.equal((await ask(other.client, 1, false)).status, 200);
  // Exempting a key from its team's budget does not: the team's still binds.
  // Clearing the team's budget lets its keys spend again.
  assert.equal((await call('DELETE', `/admin/budgets/teams/${team}`)).status, 200);
  assert.equal((await ask(keys[0].client, 1, false)).status, 200);
  assert.equal((await call('DELETE', `/admin/budgets/teams/${team}`)).status, 404);
});

test('the budget admin API refuses bad input and every key but the admin key', async () => {
  const k = await newKey(`budget-c-${tag}`, 'c1');
  const path = `/admin/budgets/keys/${k.id}`;
  for (const [body, what] of [[{ limit: 5 }, 'a number'], [{ limit: '5', period: 'week' }, 'a period'],
    [{ limit: '-1' }, 'a negative'], [{ limit: '1', soft_limit: '2' }, 'soft above limit'], ['{', 'not JSON'],
    [{ limit: '1', extra: true }, 'an unknown field'], [{}, 'no limit']]) {
    const r = await call('PUT', path, body);
    assert.equal(r.status, 400, `${what}: ${r.body}`);
    assert.equal(r.json.error.type, 'invalid_request_error', what);
  }
  assert.equal((await call('GET', path)).json.status, null, 'nothing was set');
  assert.equal((await call('PUT', '/admin/budgets/keys/key_0000000000000000', { limit: '1' })).status, 404);
  assert.equal((await call('PUT', '/admin/budgets/teams/bad%20team', { limit: '1' })).status, 400);
  assert.equal((await call('PUT', '/admin/budgets/widgets/x', { limit: '1' })).status, 404);
  for (const headers of [{ authorization: `Bearer ${k.key}` }, {}]) {
    assert.equal((await call('GET', '/admin/budgets', undefined, headers)).status, 401);
    assert.equal((await call('PUT', path, { limit: '1' }, headers)).status, 401);
  }
  // A zero budget blocks the key; {"limit": null} exempts it; DELETE restores the default (none here).
  assert.equal((await call('PUT', path, { limit: '0' })).status, 200);
  const blocked = await ask(k.client, 0, false);
  assert.equal(blocked.status, 429);
  assert.equal(blocked.error.code, 'insufficient_quota');
  assert.equal((await call('PUT', path, { limit: null })).status, 200);
  assert.equal((await ask(k.client, 0, false)).status, 200);
  const listed = await call('GET', '/admin/budgets');
  assert.equal(listed.status, 200);
  assert.ok(!listed.json.data.some((d) => d.id === k.id), 'an exempt key has no budget to list');
  assert.equal((await call('DELETE', path)).status, 200);
  assert.equal((await call('GET', path)).json.source, 'default');
});
