// The cost dashboard (GET /dashboard) in a real browser: Debian's Chromium,
// headless, driven by playwright-core, trusting the server's local CA
// through an NSS database in a temporary HOME (no certificate errors are
// ignored). Two teams' keys make requests with the official openai SDK
// (a long system prompt repeated, so some prompts hit the cache; one key's
// starts with the time, so the prefix-breaker panel shows it); the admin
// signs in through the form and every number the page shows for the totals,
// the keys and the teams equals /admin/usage's for the page's range, to the
// string; a screenshot is saved; then a key of team alpha signs in and
// nothing of team beta (key ids, names, the team, its system prompt's
// fingerprint) is in the page or in /dashboard/api/overview, and that key
// gets 401 on the admin API. No key is ever in a URL, the page or storage.
//
// run.sh starts the server (ctest e2e_dashboard: run.sh BINARY
// dashboard.test.mjs) and skips with 77 when Chromium is absent; run some
// other way without Chromium, the test is reported as skipped, not passed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { server as connect } from './server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const chromiumPath = process.env.LG_CHROMIUM ?? '/usr/bin/chromium';
const haveChromium = existsSync(chromiumPath);
const skip = haveChromium ? false : `Chromium not found at ${chromiumPath} (scripts/install-deps.sh installs it)`;
if (skip) console.log(`dashboard e2e: SKIPPED: ${skip}`);

// Without these Chromium reaches for Google's services and stalls on this closed network.
const chromiumFlags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                       '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const ADMIN = process.env.LG_ADMIN_KEY;
let server, temp, context, page;
const keys = {};      // name -> {id, key, team}
const urls = [];      // every URL the browser asked for

before(async () => {
  if (skip) return;
  server = connect();
  for (const [team, name] of [['dash-alpha', 'alpha-lead'], ['dash-alpha', 'alpha-bot'], ['dash-beta', 'beta-ops']]) {
    keys[name] = { key: await server.createKey(team, name), team };
  }
  const listed = JSON.parse((await server.request('GET', '/admin/keys', { headers: auth(ADMIN) })).body).data;
  for (const k of listed) if (keys[k.name]) keys[k.name].id = k.id;
  // A monthly budget for team alpha (beta has none): the page shows what is left.
  const put = await server.request('PUT', '/admin/budgets/teams/dash-alpha', {
    headers: { ...auth(ADMIN), 'content-type': 'application/json' }, body: { limit: '0.05', period: 'month' },
  });
  assert.equal(put.status, 200, put.body);

  // Requests: each team repeats its own long system prompt, so its later
  // requests hit the cache; alpha's bot streams one.
  const alphaPrompt = 'You are the alpha team\'s research agent. Cite every source you use. '.repeat(60);
  const betaPrompt = 'You are the beta team\'s support agent. Answer politely and briefly. '.repeat(60);
  const ask = async (name, system, user, stream = false) => {
    const client = new OpenAI({ apiKey: keys[name].key, baseURL: server.url + '/v1', maxRetries: 0 });
    const body = { model: 'deepseek-chat', max_tokens: 4, temperature: 0,
                   messages: [{ role: 'system', content: system }, { role: 'user', content: user }] };
    if (!stream) return (await client.chat.completions.create(body)).usage;
    let usage = null;
    for await (const c of await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })) {
      if (c.usage) usage = c.usage;
    }
    return usage;
  };
  await ask('alpha-lead', alphaPrompt, 'Summarise the first paper.');
  const hit = await ask('alpha-lead', alphaPrompt, 'And the second one.');
  assert.ok(hit.prompt_cache_hit_tokens > 0, 'the repeated system prompt hits the cache');
  await ask('alpha-bot', alphaPrompt, 'List the open questions.', true);
  // Alpha's bot starts its system prompt with the time: each request diverges
  // from the previous one in its first line (the prefix-breaker panel).
  for (const second of [10, 11, 12]) {
    await ask('alpha-bot', `Current time: 2026-12-03T07:41:${second}Z\n` + alphaPrompt, 'Any news?');
  }
  await ask('beta-ops', betaPrompt, 'A customer asks about refunds.');
  await ask('beta-ops', betaPrompt, 'And about shipping.');

  // A HOME whose NSS database trusts the server's CA: Chromium verifies the
  // certificate as it would a public one.
  temp = mkdtempSync(join(tmpdir(), 'lg-dashboard-e2e-'));
  const nss = join(temp, 'home', '.pki', 'nssdb');
  mkdirSync(nss, { recursive: true });
  execFileSync('certutil', ['-d', `sql:${nss}`, '-N', '--empty-password']);
  execFileSync('certutil', ['-d', `sql:${nss}`, '-A', '-t', 'C,,', '-n', 'latentgate-e2e-ca', '-i',
                            process.env.NODE_EXTRA_CA_CERTS]);
  const { chromium } = await import('playwright-core');
  context = await chromium.launchPersistentContext(join(temp, 'profile'), {
    executablePath: chromiumPath,
    headless: true,
    args: chromiumFlags.filter((f) => f !== '--headless'),  // playwright adds --headless itself
    env: { ...process.env, HOME: join(temp, 'home') },
    viewport: { width: 1440, height: 900 },
    deviceScaleFactor: 1,
  });
  page = context.pages()[0] ?? await context.newPage();
  context.on('request', (r) => urls.push(r.url()));
  page.on('pageerror', (e) => console.log(`page error: ${e.message}`));
});

after(async () => {
  if (context) await context.close();
  if (temp) rmSync(temp, { recursive: true, force: true });
});

function auth(key) { return { authorization: `Bearer ${key}` }; }

async function adminJson(path) {
  const r = await server.request('GET', path, { headers: auth(ADMIN) });
  assert.equal(r.status, 200, `${path}: ${r.body}`);
  return JSON.parse(r.body);
}

async function signIn(key, role) {
  await page.waitForSelector('body[data-state=signin]');
  await page.fill('[data-testid=signin-key]', key);
  await page.click('[data-testid=signin-submit]');
  await page.waitForSelector(`body[data-state=ready] [data-testid=viewer][data-role=${role}]`);
  assert.equal(await page.inputValue('[data-testid=signin-key]'), '', 'the key does not stay in the form');
}

const attr = (selector, name) => page.getAttribute(selector, name);

// What the page shows: the totals, and each key's and team's exact cost.
async function shown() {
  return page.evaluate(() => {
    const value = (root, id) => root.querySelector(`[data-testid=${id}]`)?.getAttribute('data-value') ?? null;
    const rows = (id, key) => Object.fromEntries([...document.querySelectorAll(`[data-testid=${id}]`)].map((r) => [
      r.getAttribute(key), { cost: value(r, id.replace('-row', '-cost')), savings: value(r, id.replace('-row', '-savings')) },
    ]));
    const info = document.querySelector('[data-testid=range-info]');
    return {
      from: Number(info.dataset.from), to: Number(info.dataset.to),
      cost: value(document, 'total-cost-value'), savings: value(document, 'total-savings-value'),
      requests: document.querySelector('[data-testid=total-requests]').dataset.value,
      hit: Number(document.querySelector('[data-testid=hit-rate]').dataset.hit),
      prompt: Number(document.querySelector('[data-testid=hit-rate]').dataset.prompt),
      keys: rows('key-row', 'data-key-id'), teams: rows('team-row', 'data-team'),
    };
  });
}

// The page's own fetch of the overview (its cookie, its origin).
async function overviewFromPage() {
  return page.evaluate(async () => {
    const r = await fetch('/dashboard/api/overview?range=24h', { credentials: 'same-origin' });
    return { status: r.status, body: await r.text() };
  });
}

const CAUSES = ['new', 'evicted', 'model_changed', 'in_flight', 'recomputed', 'partial_block', 'uncached'];
const REGIONS = ['system', 'tools', 'history', 'input'];
const sumOf = (counts, names) => names.reduce((s, n) => s + counts[n], 0);

// The "Why misses" panel: a row for every usage row (the scope's totals,
// teams, keys, system prompts) whose miss tokens have a cause, each with the
// usage API's counters to the token and its largest cause's share in words;
// each recent request's anatomy cell is its ledger entry's. Entries the
// gateway recorded no anatomy for count in no cause: then the panel says so
// and the recent requests say "not recorded".
async function checkWhyMisses(range, usage, byKey, byTeam, o) {
  const byPrompt = await adminJson(`/admin/usage?${range}&group_by=system_prompt`);
  const rows = await page.evaluate(() => [...document.querySelectorAll('[data-testid=why-row]')].map((r) => ({
    kind: r.dataset.kind, id: r.dataset.id, tokens: Number(r.dataset.tokens),
    attrs: Object.fromEntries([...r.attributes].map((a) => [a.name, a.value])),
    causes: r.querySelector('[data-testid=why-causes]').textContent,
    regions: r.querySelector('[data-testid=why-regions]').textContent,
  })));
  const expected = [['total', '', usage.totals]];
  for (const t of byTeam.data) expected.push(['team', t.team, t]);
  for (const k of byKey.data) expected.push(['key', k.key_id, k]);
  // The page lists the prompts the overview has (the top 20): all of them here.
  for (const p of byPrompt.data) if (p.system_prompt) expected.push(['system_prompt', p.system_prompt, p]);
  const withCause = expected.filter(([, , row]) => sumOf(row.miss_tokens_by_cause, CAUSES) > 0);
  assert.equal(rows.length, withCause.length, JSON.stringify(rows.map((r) => [r.kind, r.id])));
  for (const [kind, id, row] of withCause) {
    const shown = rows.find((r) => r.kind === kind && r.id === id);
    assert.ok(shown, `why-misses row for ${kind} ${id}`);
    const total = sumOf(row.miss_tokens_by_cause, CAUSES);
    assert.equal(shown.tokens, total, `${kind} ${id}`);
    for (const c of CAUSES) assert.equal(Number(shown.attrs[`data-cause-${c}`]), row.miss_tokens_by_cause[c], `${kind} ${id} ${c}`);
    for (const r of REGIONS) assert.equal(Number(shown.attrs[`data-region-${r}`]), row.miss_tokens_by_first_region[r], `${kind} ${id} ${r}`);
    const top = CAUSES.reduce((a, b) => (row.miss_tokens_by_cause[b] > row.miss_tokens_by_cause[a] ? b : a));
    assert.ok(shown.causes.startsWith(`${Math.round(100 * row.miss_tokens_by_cause[top] / total)}% `), shown.causes);
    // group_by=miss_cause says the same.
    if (kind === 'total') {
      const pivot = await adminJson(`/admin/usage?${range}&group_by=miss_cause`);
      assert.deepEqual(pivot.data.map((p) => p.miss_cause), CAUSES);
      for (const p of pivot.data) assert.equal(p.prompt_cache_miss_tokens, row.miss_tokens_by_cause[p.miss_cause]);
    }
  }
  const cells = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('[data-testid=recent-row]')].map((r) => {
    const cell = r.querySelector('[data-testid=recent-anatomy]');
    return [r.dataset.requestId, { cause: cell.dataset.cause ?? null, first: cell.dataset.firstToken ?? null, text: cell.textContent }];
  })));
  for (const e of o.recent) {
    const cell = cells[e.request_id];
    assert.ok(cell.text.startsWith(`hit ${e.prompt_cache_hit_tokens_memory.toLocaleString('en-US')} pool`), cell.text);
    if (e.miss === null) {
      assert.ok(cell.text.endsWith('not recorded'), cell.text);
    } else {
      assert.equal(cell.cause, e.miss.first_miss_cause);
      assert.equal(Number(cell.first), e.miss.first_miss_token);
    }
  }
  if (!withCause.length) {
    assert.ok(o.recent.every((e) => e.miss === null), 'usage rows without causes, yet an entry with an anatomy');
    assert.equal(await page.locator('#why-table td.muted').textContent(), 'no miss anatomies recorded in this range');
  }
}

function assertNoSecrets(text, where) {
  for (const secret of [ADMIN, ...Object.values(keys).map((k) => k.key)]) {
    assert.ok(!text.includes(secret), `${where} holds a key`);
  }
}

test('the admin signs in and the dashboard shows /admin/usage\'s numbers; a team key sees only its team', { skip }, async () => {
  await page.goto(server.url + '/dashboard');
  await signIn(ADMIN, 'admin');

  const s = await shown();
  const range = `from=${s.from}&to=${s.to}`;
  const usage = await adminJson(`/admin/usage?${range}`);
  const byKey = await adminJson(`/admin/usage?${range}&group_by=key`);
  const byTeam = await adminJson(`/admin/usage?${range}&group_by=team`);
  assert.equal(s.cost, usage.totals.cost_total);
  assert.equal(s.savings, usage.totals.cache_savings);
  assert.equal(s.requests, String(usage.totals.requests));
  assert.equal(s.hit, usage.totals.prompt_cache_hit_tokens);
  assert.equal(s.prompt, usage.totals.prompt_tokens);
  assert.ok(usage.totals.requests >= 5 && Number(usage.totals.cache_savings) > 0, JSON.stringify(usage.totals));
  for (const row of byKey.data) {
    assert.deepEqual(s.keys[row.key_id], { cost: row.cost_total, savings: row.cache_savings }, `key ${row.key_id}`);
  }
  for (const row of byTeam.data) {
    assert.deepEqual(s.teams[row.team], { cost: row.cost_total, savings: row.cache_savings }, `team ${row.team}`);
  }
  // Keys and teams without usage in the range show zero.
  for (const [id, v] of Object.entries(s.keys)) {
    if (!byKey.data.some((r) => r.key_id === id)) assert.deepEqual(v, { cost: '0', savings: '0' }, id);
  }
  for (const name of Object.keys(keys)) assert.ok(s.keys[keys[name].id], `${name} is listed`);
  assert.ok(s.teams['dash-alpha'] && s.teams['dash-beta']);
  // The JSON behind it: the usage API's strings, by construction.
  const overview = await overviewFromPage();
  assert.equal(overview.status, 200);
  const o = JSON.parse(overview.body);
  assert.deepEqual(o.totals, usage.totals);
  // The memory picture is /metrics' (weights and pool capacity do not move).
  const metrics = (await server.request('GET', '/metrics', { headers: auth(ADMIN) })).body;
  const gauge = (name) => Number(metrics.match(new RegExp(`^${name} (\\S+)$`, 'm'))[1]);
  assert.equal(Number(await attr('[data-testid=memory-weights]', 'data-bytes')), gauge('latentgate_model_weights_bytes'));
  assert.equal(Number(await attr('[data-testid=memory-capacity]', 'data-bytes')), gauge('latentgate_latent_pool_capacity_bytes'));
  // What more cache would buy: a curve per tier, today's size marked, as /admin/cache/mrc answers.
  const mrc = await adminJson('/admin/cache/mrc');
  assert.ok(mrc.tiers.length >= 1 && mrc.tiers[0].tier === 'tier0', JSON.stringify(mrc));
  assert.ok(mrc.tiers[0].accesses > 0, 'the requests reached the curve');
  assert.ok(await page.isVisible('#curves-panel'));
  // Read a moment apart: only the time counted, and the per-day figures over it, may move.
  const withoutTheClock = (tiers) => tiers.map(({ counted_seconds, accesses_per_day, ...t }) => ({
    ...t, points: t.points.map(({ extra_hit_tokens_per_day, savings_per_day, ...p }) => p) }));
  assert.deepEqual(withoutTheClock(o.cache_curves), withoutTheClock(mrc.tiers));
  assert.deepEqual(o.cache_curve_prices, mrc.prices);
  const perMillion = (rate) => '$' + String(rate / 1e6);
  const pricesText = await page.textContent('[data-testid=cache-curve-prices]');
  assert.ok(pricesText.includes(`Priced at ${mrc.prices.model}'s rates in force now: ` +
                                `${perMillion(mrc.prices.rates.input_cache_hit)} per 1M tokens read from the cache instead of ` +
                                `${perMillion(mrc.prices.rates.input_cache_miss)} computed`), pricesText);
  for (const tier of mrc.tiers) {
    const chart = `[data-testid=curve-${tier.tier}]`;
    assert.equal(Number(await attr(chart, 'data-size-blocks')), tier.size_blocks);
    assert.equal(Number(await attr(chart, 'data-hit-today')), tier.hit_ratio_today);
    assert.equal(Number(await attr(chart, 'data-points')), tier.points.length);
    assert.equal(await page.locator(`[data-testid=today-${tier.tier}]`).count(), 1);
    assert.equal(await page.locator(`${chart} circle`).count(), tier.points.length);
    // What 2x and half the tier would have been worth, in words: the hit ratios as the curve has them, a
    // saving where the larger size hits more (a cost where the smaller hits less), and, minutes into the
    // run, marked an extrapolation.
    const name = tier.tier === 'tier0' ? 'the latent pool (tier 0)' : 'the disk tier';
    const pct = (r) => (100 * r).toFixed(1) + '%';
    for (const factor of [2, 0.5]) {
      const point = tier.points.find((p) => Math.abs(p.size_factor - factor) < 1e-9);
      const worth = `[data-testid="curve-worth-${tier.tier}-${factor}"]`;
      const text = await page.textContent(worth);
      assert.ok(text.startsWith(`With ${factor}x ${name}: ${pct(point.hit_ratio)} instead of ${pct(tier.hit_ratio_today)} ` +
                                'of block accesses, '), text);
      const saved = Number(await attr(worth, 'data-savings'));
      const wording = saved > 0 ? /saving about \$[\d.,]+ a day at current prices/
        : saved < 0 ? /costing about \$[\d.,]+ a day more at current prices/ : /no change in cost at current prices/;
      assert.match(text, wording);
      assert.equal(Math.sign(saved), Math.sign(point.extra_hit_tokens_per_day), text);
      assert.equal(await attr(worth, 'data-reliable'), 'false');
      assert.match(text, /\(extrapolated from \d+ min of traffic\)$/);
    }
  }
  // Prompts that break their own prefix: alpha's bot, at message 0 of its
  // system prompt, as /admin/cache/prefix-breakers answers.
  const breakers = await adminJson('/admin/cache/prefix-breakers');
  assert.equal(breakers.data.length, 1, JSON.stringify(breakers));
  assert.equal(breakers.data[0].key_id, keys['alpha-bot'].id);
  assert.ok(breakers.data[0].flagged_requests >= 2, JSON.stringify(breakers));  // the first stamped one may count: it follows an unstamped request
  assert.deepEqual(o.prefix_breakers, breakers.data);
  assert.ok(await page.isVisible('#breakers-panel'));
  const breakerRow = `[data-testid=breaker-row][data-key-id=${keys['alpha-bot'].id}]`;
  assert.equal(await attr(breakerRow, 'data-part'), 'system');
  assert.equal(await attr(breakerRow, 'data-message'), '0');
  assert.equal(await attr(breakerRow, 'data-message-token'), String(breakers.data[0].divergence.message_token));
  assert.equal(await attr(`${breakerRow} [data-testid=breaker-saving]`, 'data-value'), breakers.data[0].saving_per_day);
  assert.ok((await page.textContent(breakerRow)).includes(breakers.data[0].advice));
  // Budgets: each key's is /v1/usage's (alpha's team budget binds both its keys; beta has none).
  for (const name of Object.keys(keys)) {
    const own = JSON.parse((await server.request('GET', '/v1/usage', { headers: auth(keys[name].key) })).body).budget;
    const cell = await attr(`[data-testid=key-row][data-key-id=${keys[name].id}] [data-testid=key-budget]`, 'data-value');
    assert.equal(cell, own ? own.remaining : null, name);
    assert.equal(o.keys.find((k) => k.key_id === keys[name].id).budget?.remaining, own?.remaining, name);
  }
  // Recent requests: every key that made one appears, with its TTFT.
  assert.ok(await page.locator('[data-testid=recent-row]').count() >= 5);
  await checkWhyMisses(range, usage, byKey, byTeam, o);

  const artifacts = resolve(process.env.LG_ARTIFACTS_DIR ?? join(here, '..', '..', 'build', 'test-artifacts'));
  mkdirSync(artifacts, { recursive: true });
  const shot = join(artifacts, 'dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`dashboard screenshot (admin): ${shot}`);

  // No key in the page, its URLs or its storage; the session is an HttpOnly cookie.
  assertNoSecrets(await page.content(), 'the admin page');
  assertNoSecrets(urls.join('\n'), 'a URL');
  assert.deepEqual(await page.evaluate(() => [localStorage.length, sessionStorage.length, document.cookie]), [0, 0, '']);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === 'lg_dashboard');
  assert.ok(session, JSON.stringify(cookies.map((c) => c.name)));
  assert.deepEqual([session.httpOnly, session.secure, session.sameSite, session.path], [true, true, 'Strict', '/dashboard']);
  assert.match(session.value, /^[A-Za-z0-9_-]{43}$/);
  assertNoSecrets(session.value, 'the cookie');

  // Sign out: the cookie is gone and the API refuses the page.
  await page.click('[data-testid=signout]');
  await page.waitForSelector('body[data-state=signin]');
  assert.ok(!(await context.cookies()).some((c) => c.name === 'lg_dashboard'));
  assert.equal((await overviewFromPage()).status, 401);
  assert.equal(await page.locator('[data-testid=key-row]').count(), 0, 'nothing of the admin view stays in the page');

  // A key of team alpha: its team's keys (both), nothing of beta's.
  await signIn(keys['alpha-lead'].key, 'team');
  const beta = keys['beta-ops'];
  const betaPrompts = (await adminJson(`/admin/usage?group_by=system_prompt&team=dash-beta`)).data
    .map((r) => r.system_prompt).filter(Boolean);
  assert.ok(betaPrompts.length >= 1);
  const forbidden = [beta.id, 'beta-ops', 'dash-beta', ...betaPrompts];
  const html = await page.content();
  const teamView = await overviewFromPage();
  assert.equal(teamView.status, 200);
  const bearerView = await server.request('GET', '/dashboard/api/overview', { headers: auth(keys['alpha-lead'].key) });
  assert.equal(bearerView.status, 200);
  for (const [where, text] of [['the page', html], ['the overview', teamView.body], ['the Bearer overview', bearerView.body]]) {
    for (const f of forbidden) assert.ok(!text.includes(f), `${where} shows team beta's ${f}`);
    assertNoSecrets(text, where);
  }
  const t = JSON.parse(teamView.body);
  assert.equal(t.viewer.team, 'dash-alpha');
  assert.ok(!('teams' in t) && !('memory' in t) && !('cache_curves' in t) && !('cache_curve_prices' in t));
  assert.deepEqual(t.keys.map((k) => k.key_id).sort(), [keys['alpha-lead'].id, keys['alpha-bot'].id].sort());
  assert.ok(await page.isHidden('#teams-panel') && await page.isHidden('#memory-panel') &&
            await page.isHidden('#curves-panel'));
  assert.equal(await page.locator('[data-testid^=curve-]').count(), 0, 'no curve of the whole cache for a team');
  // Its own team's prefix breaker (alpha's bot).
  assert.deepEqual(t.prefix_breakers.map((b) => b.key_id), [keys['alpha-bot'].id]);
  assert.ok(await page.isVisible('#breakers-panel'));
  const ts = await shown();
  const alphaUsage = await adminJson(`/admin/usage?from=${ts.from}&to=${ts.to}&team=dash-alpha`);
  assert.equal(ts.cost, alphaUsage.totals.cost_total);
  assert.equal(ts.savings, alphaUsage.totals.cache_savings);
  assert.deepEqual(t.totals, alphaUsage.totals);
  const leadBudget = JSON.parse((await server.request('GET', '/v1/usage', { headers: auth(keys['alpha-lead'].key) })).body).budget;
  assert.ok(leadBudget, 'team alpha has a budget');
  assert.equal(await attr('[data-testid=budget-remaining-value]', 'data-value'), leadBudget.remaining);
  assert.deepEqual(t.budget, leadBudget);
  await page.screenshot({ path: join(artifacts, 'dashboard-team.png'), fullPage: true });
  console.log(`dashboard screenshot (team dash-alpha): ${join(artifacts, 'dashboard-team.png')}`);

  // A team's key is no admin.
  for (const path of ['/admin/usage', '/admin/keys', '/admin/cache/mrc']) {
    const r = await server.request('GET', path, { headers: auth(keys['alpha-lead'].key) });
    assert.equal(r.status, 401, path);
    assert.equal(JSON.parse(r.body).error.code, 'invalid_api_key');
  }
  assertNoSecrets(urls.join('\n'), 'a URL');
  assert.ok(urls.every((u) => new URL(u).origin === new URL(server.url).origin), 'the page loads nothing from elsewhere');
});
