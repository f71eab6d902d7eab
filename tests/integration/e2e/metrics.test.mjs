// GET /metrics of `latentgate serve` (run.sh starts it with
// LATENTGATE_SERVER_METRICS_TOKEN = LG_METRICS_TOKEN): who may scrape, and
// counters that follow what the official `openai` SDK was told. The server is
// shared with the other e2e files, which run one at a time, so a delta
// between two scrapes of this file is this file's own requests.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { server as connect } from './server.mjs';

let server, key, client;

before(async () => {
  server = connect();
  key = await server.createKey('metrics-team', 'metrics e2e');
  client = new OpenAI({ apiKey: key, baseURL: server.url + '/v1', maxRetries: 0 });
});

// Sample lines into a Map of `name{label="value",...}` (labels as written) to
// numbers; every sample's family must have # HELP and # TYPE before it.
function parse(text) {
  const samples = new Map();
  const typed = new Set(), helped = new Set();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    let m = line.match(/^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) /);
    if (m) { (m[1] === 'HELP' ? helped : typed).add(m[2]); continue; }
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/);
    assert.ok(m, `not a sample line: ${line}`);
    const family = typed.has(m[1]) ? m[1] : m[1].replace(/_(bucket|sum|count)$/, '');
    assert.ok(typed.has(family) && helped.has(family), `no HELP/TYPE before ${line}`);
    const value = m[3] === '+Inf' ? Infinity : Number(m[3]);
    assert.ok(!Number.isNaN(value), line);
    samples.set(m[1] + (m[2] ?? ''), value);
  }
  return samples;
}

// Exact decimal dollars ("0.000001792") as pico-dollars.
function pico(dollars) {
  const [whole, frac = ''] = dollars.split('.');
  return BigInt(whole) * 10n ** 12n + BigInt(frac.padEnd(12, '0'));
}

async function scrape(token) {
  const r = await server.request('GET', '/metrics', { headers: { authorization: `Bearer ${token}` } });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  return parse(r.body);
}

test('GET /metrics: counters follow what the SDK was told; only the admin key and the metrics token may scrape', async () => {
  const before = await scrape(process.env.LG_METRICS_TOKEN);
  const r = await client.chat.completions.create({
    model: server.model, messages: [{ role: 'user', content: 'Count the requests, please.' }], max_tokens: 6,
  });
  const stream = await client.chat.completions.create({
    model: server.model, messages: [{ role: 'user', content: 'And this one.' }], max_tokens: 4, stream: true,
    stream_options: { include_usage: true },
  });
  let streamed = null;
  for await (const chunk of stream) if (chunk.usage) streamed = chunk.usage;
  assert.ok(streamed);
  const after = await scrape(process.env.LG_ADMIN_KEY);

  const delta = (name) => (after.get(name) ?? 0) - (before.get(name) ?? 0);
  assert.equal(delta('latentgate_http_requests_total{endpoint="/v1/chat/completions",method="POST",code="200"}'), 2);
  assert.equal(delta('latentgate_tokens_total{kind="output"}'), r.usage.completion_tokens + streamed.completion_tokens);
  assert.equal(delta('latentgate_tokens_total{kind="prompt_miss"}'),
    r.usage.prompt_cache_miss_tokens + streamed.prompt_cache_miss_tokens);
  assert.equal(delta('latentgate_tokens_total{kind="prompt_hit_tier0"}') + delta('latentgate_tokens_total{kind="prompt_hit_disk"}'),
    r.usage.prompt_cache_hit_tokens + streamed.prompt_cache_hit_tokens);
  assert.equal(delta('latentgate_time_to_first_token_seconds_count'), 2);
  assert.equal(delta('latentgate_e2e_request_latency_seconds_count'), 2);
  assert.ok(after.get('latentgate_model_weights_bytes') > 0);
  // The ledger's cost by team: this file's two requests, exactly what the
  // clients were told (usage.cost, exact decimal dollars), summed over every
  // team's series (the team label is bounded: this team may be "other").
  const costSum = (m) => [...m].filter(([k]) => k.startsWith('latentgate_cost_picodollars_total{'))
    .reduce((a, [, v]) => a + v, 0);
  assert.equal(costSum(after) - costSum(before), Number(pico(r.usage.cost.total) + pico(streamed.cost.total)));
  const pool = ['running', 'cached', 'free'].map((s) => after.get(`latentgate_latent_pool_blocks{state="${s}"}`));
  assert.equal(pool.reduce((a, b) => a + b), after.get('latentgate_latent_pool_capacity_blocks'));

  for (const bad of [key, 'not-the-metrics-token-0123456789']) {
    const refused = await server.request('GET', '/metrics', { headers: { authorization: `Bearer ${bad}` } });
    assert.equal(refused.status, 401);
    assert.equal(JSON.parse(refused.body).error.code, 'invalid_api_key');
  }
  const anonymous = await server.request('GET', '/metrics');
  assert.equal(anonymous.status, 401);
  const text = (await server.request('GET', '/metrics', { headers: { authorization: `Bearer ${process.env.LG_ADMIN_KEY}` } })).body;
  for (const secret of [key, process.env.LG_ADMIN_KEY, process.env.LG_METRICS_TOKEN, 'Count the requests']) {
    assert.ok(!text.includes(secret), secret);
  }
});
