// LatentGate's cost dashboard (docs/dashboard.md). Plain DOM and SVG, no
// framework, no inline script or style (the page's Content-Security-Policy
// forbids both). Every number comes from GET /dashboard/api/overview; amounts
// are the usage API's exact decimal strings, kept in data-value and title
// where the text shows fewer digits. Text is only ever set with textContent.
'use strict';

(() => {
  const REFRESH_MS = 10000;
  const SVG = 'http://www.w3.org/2000/svg';
  const $ = (id) => document.getElementById(id);
  let timer = null;
  let generation = 0;  // a sign-out or a new sign-in makes older replies stale

  // ------------------------------------------------------------ elements

  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  function svg(tag, attrs = {}, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function titled(node, title) {
    node.append(svg('title', {}, title));
    return node;
  }

  // ------------------------------------------------------------ numbers

  const intFmt = new Intl.NumberFormat('en-US');
  const int = (n) => intFmt.format(n);

  // An exact decimal dollar string, shown legibly; the exact string stays in
  // data-value and the title.
  function moneyText(exact) {
    const v = Number(exact);
    if (v === 0) return '$0';
    if (v >= 100) return '$' + v.toLocaleString('en-US', { maximumFractionDigits: 2, minimumFractionDigits: 2 });
    if (v >= 0.01) return '$' + v.toLocaleString('en-US', { maximumFractionDigits: 4 });
    // Small amounts: three significant digits, without an exponent.
    const digits = Math.min(12, Math.max(2, 2 - Math.floor(Math.log10(v))));
    return '$' + v.toFixed(digits).replace(/0+$/, '');
  }

  function money(exact, testid, cls) {
    return el('span', { class: cls ? 'money ' + cls : 'money', 'data-testid': testid, 'data-value': exact,
                        title: '$' + exact + ' exactly', text: moneyText(exact) });
  }

  function rate(hit, prompt) {
    if (!prompt) return '–';
    return (100 * hit / prompt).toFixed(1) + '%';
  }

  function bytes(n) {
    if (n === null || n === undefined) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = n, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
    return (u === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + units[u];
  }

  function localTime(unixS, withDate) {
    const d = new Date(unixS * 1000);
    const opts = withDate ? { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' }
                          : { hour: '2-digit', minute: '2-digit', second: '2-digit' };
    return d.toLocaleString('en-GB', opts);
  }

  // Pico-dollars as a BigInt, for sums and scales that must not round.
  function pico(exact) {
    const [whole, frac = ''] = exact.split('.');
    return BigInt(whole) * 1000000000000n + BigInt((frac + '000000000000').slice(0, 12));
  }

  // ------------------------------------------------------------ requests

  async function api(method, path, body) {
    const init = { method, credentials: 'same-origin', cache: 'no-store', headers: {} };
    if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    return { status: r.status, data };
  }

  function show(state) {
    document.body.dataset.state = state;
    $('signin').hidden = state !== 'signin';
    $('board').hidden = state !== 'ready';
    $('controls').hidden = state !== 'ready';
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(load, REFRESH_MS);
  }

  async function load() {
    const mine = generation;
    let r;
    try {
      r = await api('GET', '/dashboard/api/overview?range=' + encodeURIComponent($('range').value));
    } catch (e) {
      if (mine !== generation) return;
      $('refresh-error').textContent = 'the gateway did not answer; retrying';
      return schedule();
    }
    if (mine !== generation) return;
    if (r.status === 401) {
      clearBoard();
      show('signin');
      if (document.body.dataset.signedIn === 'yes') $('signin-error').textContent = r.data?.error?.message ?? '';
      document.body.dataset.signedIn = 'no';
      return;
    }
    if (r.status !== 200) {
      $('refresh-error').textContent = 'refresh failed (' + r.status + '): ' + (r.data?.error?.message ?? '');
      return schedule();
    }
    $('refresh-error').textContent = '';
    document.body.dataset.signedIn = 'yes';
    render(r.data);
    show('ready');
    schedule();
  }

  async function signIn(ev) {
    ev.preventDefault();
    const input = $('signin-key');
    const key = input.value;
    input.value = '';  // the key stays in no field, URL or storage
    $('signin-error').textContent = '';
    const r = await api('POST', '/dashboard/session', { key });
    if (r.status !== 200) {
      $('signin-error').textContent = r.data?.error?.message ?? 'Sign-in failed (' + r.status + ').';
      return;
    }
    ++generation;
    await load();
  }

  async function signOut() {
    ++generation;
    clearTimeout(timer);
    await api('DELETE', '/dashboard/session');
    document.body.dataset.signedIn = 'no';
    clearBoard();
    show('signin');
    $('signin-key').focus();
  }

  // Nothing of a signed-out viewer stays in the page.
  function clearBoard() {
    for (const id of ['keys-table', 'teams-table', 'prompts-table', 'why-table', 'why-legend', 'recent-table', 'memory',
                      'curves', 'cost-chart',
                      'token-chart', 'viewer', 'range-info', 'cost-split', 'hit-split', 'request-split',
                      'budget-detail', 'prompt-count', 'updated']) {
      $(id).replaceChildren();
    }
    for (const id of ['total-cost', 'total-savings', 'hit-rate', 'total-requests', 'budget-remaining']) {
      $(id).replaceChildren();
    }
    $('teams-panel').hidden = true;
    $('memory-panel').hidden = true;
    $('curves-panel').hidden = true;
  }

  // ------------------------------------------------------------ rendering

  function render(o) {
    const v = o.viewer;
    $('viewer').replaceChildren(v.role === 'admin'
      ? el('span', { class: 'who', text: 'admin · every team' })
      : el('span', { class: 'who', text: 'team ' + v.team + ' · signed in as ' + v.key_name }));
    $('viewer').dataset.role = v.role;
    const rangeInfo = $('range-info');
    rangeInfo.textContent = localTime(o.from, true) + ' – ' + localTime(o.to, true) + ' (by ' + o.granularity + ')';
    rangeInfo.dataset.from = o.from;
    rangeInfo.dataset.to = o.to;
    rangeInfo.dataset.range = o.range;
    $('updated').textContent = localTime(o.generated_at);

    const t = o.totals;
    $('total-cost').replaceChildren(money(t.cost_total, 'total-cost-value'));
    $('total-cost').dataset.value = t.cost_total;
    $('cost-split').replaceChildren('hit ', money(t.cost_input_cache_hit), ' · miss ', money(t.cost_input_cache_miss),
                                    ' · output ', money(t.cost_output));
    $('total-savings').replaceChildren(money(t.cache_savings, 'total-savings-value'));
    $('total-savings').dataset.value = t.cache_savings;
    $('hit-rate').textContent = rate(t.prompt_cache_hit_tokens, t.prompt_tokens);
    $('hit-rate').dataset.hit = t.prompt_cache_hit_tokens;
    $('hit-rate').dataset.prompt = t.prompt_tokens;
    $('hit-split').textContent = int(t.prompt_cache_hit_tokens) + ' of ' + int(t.prompt_tokens) + ' prompt tokens';
    $('total-requests').textContent = int(t.requests);
    $('total-requests').dataset.value = t.requests;
    $('request-split').textContent = int(t.completed_requests) + ' completed · ' + int(t.cancelled_requests) +
      ' cancelled · ' + int(t.failed_requests + t.refused_requests) + ' failed or refused';
    renderBudget(o);

    const periods = fillPeriods(o);
    costChart($('cost-chart'), periods, o.granularity);
    tokenChart($('token-chart'), periods, o.granularity);

    $('memory-panel').hidden = !o.memory;
    $('memory').replaceChildren(...(o.memory ? memoryPicture(o.memory) : []));
    $('curves-panel').hidden = !o.cache_curves;
    $('curves').replaceChildren(...(o.cache_curves ? o.cache_curves.map(curveChart) : []));
    $('curves-prices').textContent = o.cache_curve_prices ? curvePricesText(o.cache_curve_prices) : '';
    keysTable(o);
    $('teams-panel').hidden = !o.teams;
    $('teams-table').replaceChildren(...(o.teams ? teamsTable(o.teams) : []));
    breakersTable(o);
    promptsTable(o);
    whyTable(o);
    recentTable(o);
  }

  function renderBudget(o) {
    const card = $('budget-remaining'), detail = $('budget-detail');
    if (o.budget) {
      card.replaceChildren(money(o.budget.remaining, 'budget-remaining-value'));
      detail.replaceChildren(money(o.budget.spent), ' spent of ', money(o.budget.limit), ' (' + o.budget.scope + ', per ' +
                             o.budget.period + ')');
      // With limits.redis_url: where the amounts were counted, when not Redis's shared counters.
      const note = { records: 'spent as the ledger of record counts it',
                     replica_ledger: 'this replica\'s spending only',
                     replica_only: 'Redis unreachable: this replica\'s count only' }[o.budget.counted];
      if (note) detail.append(' \u2014 ' + note);
    } else {
      card.textContent = 'no budget';
      detail.textContent = !o.budgets_enabled ? 'budgets are not configured'
        : o.viewer.role === 'admin' ? 'each key\'s budget is in the keys table' : 'no budget applies to this team';
    }
  }

  // One entry per period of the range, zero where the ledger has no row.
  function fillPeriods(o) {
    const step = o.granularity === 'day' ? 86400 : 3600;
    const byStart = new Map(o.series.map((r) => [r.period_start, r]));
    const out = [];
    for (let s = Math.floor(o.from / step) * step; s < o.to; s += step) {
      out.push({ start: s, row: byStart.get(s) ?? null });
    }
    return out;
  }

  function periodLabel(start, granularity) {
    const d = new Date(start * 1000);
    if (granularity === 'day') return d.toLocaleDateString('en-GB', { day: 'numeric', month: 'short' });
    return d.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit' });
  }

  // A round axis maximum and its ticks for values up to `max`.
  function niceScale(max, ticks = 4) {
    if (!(max > 0)) return { top: 1, step: 0.25 };
    const raw = max / ticks;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    return { top: step * ticks, step };
  }

  const PLOT = { left: 64, right: 52, top: 14, bottom: 34, width: 720, height: 250 };

  function axes(node, scale, format, periods, granularity) {
    const h = PLOT.height - PLOT.top - PLOT.bottom;
    const w = PLOT.width - PLOT.left - PLOT.right;
    for (let v = 0; v <= scale.top + 1e-12; v += scale.step) {
      const y = PLOT.top + h - (v / scale.top) * h;
      node.append(svg('line', { x1: PLOT.left, x2: PLOT.left + w, y1: y, y2: y, class: v === 0 ? 'axis' : 'grid' }));
      node.append(svg('text', { x: PLOT.left - 8, y: y + 4, class: 'tick', 'text-anchor': 'end' }, format(v)));
    }
    const every = Math.max(1, Math.ceil(periods.length / 8));
    const bw = w / Math.max(periods.length, 1);
    periods.forEach((p, i) => {
      if (i % every !== 0) return;
      node.append(svg('text', { x: PLOT.left + bw * (i + 0.5), y: PLOT.height - PLOT.bottom + 18, class: 'tick',
                                'text-anchor': 'middle' }, periodLabel(p.start, granularity)));
    });
    return { h, w, bw };
  }

  function tickMoney(v) {
    if (v === 0) return '$0';
    if (v >= 1) return '$' + v.toFixed(v >= 10 ? 0 : 2);
    return '$' + Number(v.toPrecision(2)).toString();
  }

  function costChart(node, periods, granularity) {
    node.replaceChildren();
    const kinds = [['cost_input_cache_hit', 'hit', 'cache hit'], ['cost_input_cache_miss', 'miss', 'cache miss'],
                   ['cost_output', 'out', 'output']];
    // Scale from exact sums (pico-dollars), drawn as numbers.
    const totals = periods.map((p) => (p.row ? Number(pico(p.row.cost_total)) / 1e12 : 0));
    const scale = niceScale(Math.max(...totals, 0));
    const { h, bw } = axes(node, scale, tickMoney, periods, granularity);
    periods.forEach((p, i) => {
      if (!p.row) return;
      let y = PLOT.top + h;
      const x = PLOT.left + bw * i + bw * 0.15;
      const g = svg('g', { class: 'bar', 'data-period': p.start });
      for (const [field, cls] of kinds) {
        const v = Number(pico(p.row[field])) / 1e12;
        const bh = (v / scale.top) * h;
        if (bh <= 0) continue;
        y -= bh;
        g.append(svg('rect', { x, y, width: Math.max(bw * 0.7, 1), height: Math.max(bh, 0.5), class: 'fill-' + cls }));
      }
      titled(g, periodLabel(p.start, granularity) + ': $' + p.row.cost_total + ' (hit $' + p.row.cost_input_cache_hit +
             ', miss $' + p.row.cost_input_cache_miss + ', output $' + p.row.cost_output + ')');
      node.append(g);
    });
    if (!periods.some((p) => p.row)) emptyNote(node, 'no requests in this range');
  }

  function tickTokens(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(v >= 1e7 ? 0 : 1) + 'M';
    if (v >= 1e3) return (v / 1e3).toFixed(v >= 1e4 ? 0 : 1) + 'k';
    return String(v);
  }

  function tokenChart(node, periods, granularity) {
    node.replaceChildren();
    const max = Math.max(...periods.map((p) => (p.row ? p.row.prompt_tokens : 0)), 0);
    const scale = niceScale(max);
    const { h, w, bw } = axes(node, scale, tickTokens, periods, granularity);
    // The hit rate's axis, on the right.
    for (const pct of [0, 25, 50, 75, 100]) {
      const y = PLOT.top + h - (pct / 100) * h;
      node.append(svg('text', { x: PLOT.left + w + 8, y: y + 4, class: 'tick rate' }, pct + '%'));
    }
    const points = [];
    periods.forEach((p, i) => {
      if (!p.row) return;
      const x = PLOT.left + bw * i + bw * 0.15;
      const hit = p.row.prompt_cache_hit_tokens, miss = p.row.prompt_cache_miss_tokens;
      const g = svg('g', { class: 'bar', 'data-period': p.start });
      const hh = (hit / scale.top) * h, mh = (miss / scale.top) * h;
      if (hh > 0) g.append(svg('rect', { x, y: PLOT.top + h - hh, width: Math.max(bw * 0.7, 1), height: hh, class: 'fill-hit' }));
      if (mh > 0) g.append(svg('rect', { x, y: PLOT.top + h - hh - mh, width: Math.max(bw * 0.7, 1), height: mh, class: 'fill-miss' }));
      titled(g, periodLabel(p.start, granularity) + ': ' + int(hit) + ' hit, ' + int(miss) + ' miss (' +
             rate(hit, p.row.prompt_tokens) + ' hit rate)');
      node.append(g);
      if (p.row.prompt_tokens > 0) {
        points.push([PLOT.left + bw * (i + 0.5), PLOT.top + h - (hit / p.row.prompt_tokens) * h]);
      }
    });
    if (points.length > 1) {
      node.append(svg('polyline', { points: points.map((q) => q.join(',')).join(' '), class: 'rate-line' }));
    }
    for (const [x, y] of points) node.append(svg('circle', { cx: x, cy: y, r: 3.5, class: 'rate-dot' }));
    if (!points.length) emptyNote(node, 'no prompt tokens in this range');
  }

  function emptyNote(node, text) {
    node.append(svg('text', { x: PLOT.width / 2, y: PLOT.height / 2, class: 'empty', 'text-anchor': 'middle' }, text));
  }

  function memoryPicture(m) {
    const p = m.latent_pool;
    const parts = [['running', p.running_blocks, p.running_bytes, 'held by running sequences'],
                   ['cached', p.cached_blocks, p.cached_bytes, 'cached prefixes'],
                   ['free', p.free_blocks, p.free_bytes, 'free']];
    const bar = svg('svg', { viewBox: '0 0 1000 28', class: 'pool-bar', 'data-testid': 'memory-pool',
                             preserveAspectRatio: 'none', role: 'img', 'aria-label': 'Latent pool by state' });
    let x = 0;
    for (const [cls, blocks, b, label] of parts) {
      const width = p.capacity_blocks ? (blocks / p.capacity_blocks) * 1000 : 0;
      if (width > 0) bar.append(titled(svg('rect', { x, y: 0, width, height: 28, class: 'pool-' + cls }),
                                       label + ': ' + int(blocks) + ' blocks, ' + bytes(b)));
      x += width;
    }
    const legend = el('div', { class: 'legend pool-legend' },
      ...parts.map(([cls, blocks, b, label]) => el('span', { 'data-testid': 'memory-' + cls, 'data-blocks': blocks,
                                                              'data-bytes': b },
        el('i', { class: 'sw pool-' + cls }), label + ': ', el('b', { text: bytes(b) }), ' (' + int(blocks) + ' blocks)')));
    const facts = el('dl', { class: 'facts' },
      el('dt', { text: 'Model weights' }), el('dd', { 'data-testid': 'memory-weights', 'data-bytes': m.weights_bytes,
                                                      text: bytes(m.weights_bytes) + ' (memory-mapped)' }),
      el('dt', { text: 'Latent pool' }), el('dd', { 'data-testid': 'memory-capacity', 'data-bytes': p.capacity_bytes,
                                                    text: bytes(p.capacity_bytes) + ' in ' + int(p.capacity_blocks) +
                                                          ' blocks of ' + bytes(p.block_bytes) +
                                                          (p.reserved_blocks ? ', ' + int(p.reserved_blocks) +
                                                           ' promised to admitted requests' : '') }),
      el('dt', { text: 'Disk tier' }), el('dd', { 'data-testid': 'memory-disk',
                                                  'data-bytes': m.disk_tier ? m.disk_tier.bytes : null,
                                                  text: m.disk_tier ? bytes(m.disk_tier.bytes) + ' in ' +
                                                    int(m.disk_tier.blocks) + ' blocks (' +
                                                    bytes(m.disk_tier.occupied_bytes) + ' on disk, ' +
                                                    m.disk_tier.state + ')' : 'none' }),
      el('dt', { text: 'Requests now' }), el('dd', { text: int(m.scheduler.decoding) + ' decoding · ' +
                                                           int(m.scheduler.prefilling) + ' prefilling · ' +
                                                           int(m.scheduler.looking_up) + ' reading the cache · ' +
                                                           int(m.scheduler.queued) + ' queued' }));
    return [bar, legend, facts];
  }

  // One tier's miss-ratio curve: hit ratio (0..100%) over the size, on a log
  // scale from 1/16x to 16x today's size; today's size is the dashed line.
  // Points estimated from few samples (below reliable_from_blocks) are drawn
  // faint.
  function curveChart(c) {
    const name = c.tier === 'tier0' ? 'Tier 0 (latent pool)' : 'Disk tier (behind today\'s tier 0)';
    const node = svg('svg', { viewBox: '0 0 ' + PLOT.width + ' ' + PLOT.height, role: 'img',
                              'data-testid': 'curve-' + c.tier, 'data-size-blocks': c.size_blocks,
                              'data-hit-today': c.hit_ratio_today, 'data-points': c.points.length,
                              'aria-label': name + ' miss-ratio curve' });
    const h = PLOT.height - PLOT.top - PLOT.bottom;
    const w = PLOT.width - PLOT.left - PLOT.right;
    const lo = Math.log2(c.points[0].size_factor), hi = Math.log2(c.points[c.points.length - 1].size_factor);
    const xOf = (f) => PLOT.left + ((Math.log2(f) - lo) / (hi - lo || 1)) * w;
    const yOf = (r) => PLOT.top + h - r * h;
    for (let v = 0; v <= 1.0001; v += 0.25) {
      node.append(svg('line', { x1: PLOT.left, x2: PLOT.left + w, y1: yOf(v), y2: yOf(v), class: v === 0 ? 'axis' : 'grid' }));
      node.append(svg('text', { x: PLOT.left - 8, y: yOf(v) + 4, class: 'tick', 'text-anchor': 'end' },
                      Math.round(v * 100) + '%'));
    }
    for (const f of [1 / 16, 1 / 4, 1, 4, 16]) {
      const p = c.points.reduce((a, b) => (Math.abs(Math.log2(b.size_factor / f)) < Math.abs(Math.log2(a.size_factor / f)) ? b : a));
      node.append(svg('text', { x: xOf(p.size_factor), y: PLOT.height - PLOT.bottom + 18, class: 'tick',
                                'text-anchor': 'middle' }, bytes(p.bytes)));
    }
    const line = (pts, cls) => {
      if (pts.length > 1) node.append(svg('polyline', { class: cls, points: pts.map((p) => xOf(p.size_factor) + ',' + yOf(p.hit_ratio)).join(' ') }));
    };
    const firstReliable = c.points.findIndex((p) => p.reliable);
    line(firstReliable < 0 ? c.points : c.points.slice(0, firstReliable + 1), 'curve-faint');
    if (firstReliable >= 0) line(c.points.slice(firstReliable), 'curve-line');
    for (const p of c.points) {
      node.append(titled(svg('circle', { cx: xOf(p.size_factor), cy: yOf(p.hit_ratio), r: 2.5,
                                         class: p.reliable ? 'curve-dot' : 'curve-dot faint',
                                         'data-savings': p.savings_per_day }),
                         int(p.blocks) + ' blocks (' + bytes(p.bytes) + '): ' + (100 * p.hit_ratio).toFixed(1) + '%' +
                         (p.reliable ? '' : ' (few samples)') + ' · ' + signedTokens(p.extra_hit_tokens_per_day) +
                         ' hit tokens a day, ' + signedMoney(p.savings_per_day) + ' a day'));
    }
    const x1 = xOf(1);
    node.append(svg('line', { x1, x2: x1, y1: PLOT.top, y2: PLOT.top + h, class: 'today', 'data-testid': 'today-' + c.tier }));
    node.append(svg('text', { x: x1 + 4, y: PLOT.top + 12, class: 'tick' },
                    'today ' + bytes(c.size_bytes) + ': ' + (100 * c.hit_ratio_today).toFixed(1) + '%'));
    const two = c.points.find((p) => Math.abs(p.size_factor - 2) < 1e-9);
    const caption = name + ': ' + int(c.accesses) + ' block accesses, ' + int(c.samples) + ' sampled keys at rate ' +
      (100 * c.sampling_rate).toPrecision(2) + '%' +
      (two ? ' · at 2x: ' + (100 * two.hit_ratio).toFixed(1) + '%' : '') +
      (c.reliable_from_blocks === null ? ' · too few samples yet' : '');
    const worth = [2, 0.5].map((f) => curveWorth(c, f)).filter((w) => w);
    return el('figure', { class: 'panel' }, el('figcaption', { text: caption }), node, ...worth);
  }

  // Rates are pico-dollars a token, which is micro-dollars per 1M tokens.
  function curvePricesText(p) {
    const perMillion = (r) => moneyText(String(r / 1e6));
    return 'Priced at ' + p.model + '\'s rates in force now: ' + perMillion(p.rates.input_cache_hit) +
      ' per 1M tokens read from the cache instead of ' + perMillion(p.rates.input_cache_miss) +
      ' computed; a day is the curve\'s block accesses since the gateway started, scaled to 24 hours.';
  }

  const signedTokens = (n) => (n > 0 ? '+' : '') + int(n);
  function signedMoney(exact) {
    const v = Number(exact);
    return (v < 0 ? '-' : v > 0 ? '+' : '') + moneyText(exact.replace(/^-/, ''));
  }

  // What `factor` x the tier would have been worth, in words: the hit ratio
  // there against today's, and savings_per_day (an exact dollar string;
  // negative: what the smaller tier would have cost) at the served model's
  // rates in force now.
  function curveWorth(c, factor) {
    const p = c.points.find((q) => Math.abs(q.size_factor - factor) < 1e-9);
    if (!p) return null;
    const tier = c.tier === 'tier0' ? 'the latent pool (tier 0)' : 'the disk tier';
    const pct = (r) => (100 * r).toFixed(1) + '%';
    const v = Number(p.savings_per_day);
    const amount = moneyText(p.savings_per_day.replace(/^-/, ''));
    const money = v > 0 ? 'saving about ' + amount + ' a day' : v < 0 ? 'costing about ' + amount + ' a day more' : 'no change in cost';
    let caveat = '';
    if (!p.savings_reliable) {
      caveat = c.counted_seconds < 3600 ? ' (extrapolated from ' + Math.max(1, Math.round(c.counted_seconds / 60)) +
        ' min of traffic)' : ' (few samples)';
    }
    return el('p', { class: 'curve-worth', 'data-testid': 'curve-worth-' + c.tier + '-' + factor,
                     'data-savings': p.savings_per_day, 'data-reliable': String(p.savings_reliable),
                     text: 'With ' + factor + 'x ' + tier + ': ' + pct(p.hit_ratio) + ' instead of ' +
                       pct(c.hit_ratio_today) + ' of block accesses, ' + money + ' at current prices' + caveat });
  }

  // Column names; a leading '#' marks a numeric (right-aligned) column.
  function head(...names) {
    return el('thead', {}, el('tr', {}, ...names.map((n) => n.startsWith('#')
      ? el('th', { class: 'num', text: n.slice(1) }) : el('th', { text: n }))));
  }

  function num(n, cls) { return el('td', { class: cls ? 'num ' + cls : 'num', text: int(n) }); }

  const compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

  // What a key's rate limits leave it now, per minute: "598 of 600 requests",
  // "1.9M of 2M tokens" (the tighter of the key's and its team's).
  function limitsCell(l) {
    const td = el('td', { class: 'num limits', 'data-testid': 'key-limits' });
    if (!l) return td.append('–'), td;
    if (l.shared) {
      return td.append(el('span', { class: 'muted', title: 'Counted in Redis by every replica together (limits.redis_url)',
                                    text: 'shared by replicas' })), td;
    }
    if (!l.requests && !l.tokens) return td.append(el('span', { class: 'muted', text: 'unlimited' })), td;
    const part = (s, unit) => el('span', { title: s ? int(s.remaining) + ' of ' + int(s.limit) + ' ' + unit + ' per minute' : '',
                                           text: s ? compact.format(s.remaining) + ' of ' + compact.format(s.limit) + ' ' + unit
                                                   : 'unlimited ' + unit });
    td.append(part(l.requests, 'requests'), el('br'), part(l.tokens, 'tokens'));
    return td;
  }

  function keysTable(o) {
    const body = el('tbody');
    for (const k of o.keys) {
      const budget = k.budget ? money(k.budget.remaining, 'key-budget') : el('span', { class: 'muted', 'data-testid': 'key-budget', text: 'no budget' });
      body.append(el('tr', { 'data-testid': 'key-row', 'data-key-id': k.key_id, 'data-team': k.team },
        el('td', {}, el('span', { class: 'key-name', text: k.key_name ?? '(revoked)' }),
           el('br'), el('code', { class: 'muted', text: k.key_id })),
        el('td', { text: k.team }),
        num(k.requests),
        num(k.prompt_cache_hit_tokens, 'hit'), num(k.prompt_cache_miss_tokens, 'miss'), num(k.completion_tokens),
        el('td', { class: 'num', text: rate(k.prompt_cache_hit_tokens, k.prompt_tokens) }),
        el('td', { class: 'num' }, money(k.cost_total, 'key-cost')),
        el('td', { class: 'num' }, money(k.cache_savings, 'key-savings', 'good')),
        el('td', { class: 'num' }, budget),
        limitsCell(k.rate_limits)));
    }
    if (!o.keys.length) body.append(el('tr', {}, el('td', { colspan: 11, class: 'muted', text: 'no keys yet' })));
    $('keys-table').replaceChildren(head('Key', 'Team', '#Requests', '#Hit tokens', '#Miss tokens', '#Output',
                                         '#Hit rate', '#Cost', '#Saved', '#Budget left', '#Limits left /min'), body);
  }

  function teamsTable(teams) {
    const body = el('tbody');
    for (const t of teams) {
      body.append(el('tr', { 'data-testid': 'team-row', 'data-team': t.team },
        el('td', { class: 'strong', text: t.team }), num(t.keys), num(t.requests),
        num(t.prompt_cache_hit_tokens, 'hit'), num(t.prompt_cache_miss_tokens, 'miss'), num(t.completion_tokens),
        el('td', { class: 'num', text: rate(t.prompt_cache_hit_tokens, t.prompt_tokens) }),
        el('td', { class: 'num' }, money(t.cost_total, 'team-cost')),
        el('td', { class: 'num' }, money(t.cache_savings, 'team-savings', 'good'))));
    }
    return [head('Team', '#Keys', '#Requests', '#Hit tokens', '#Miss tokens', '#Output', '#Hit rate', '#Cost',
                 '#Saved'), body];
  }

  function promptsTable(o) {
    const body = el('tbody');
    for (const p of o.system_prompts) {
      body.append(el('tr', { 'data-testid': 'prompt-row', 'data-fingerprint': p.system_prompt, 'data-team': p.team },
        el('td', {}, el('code', { title: p.system_prompt, text: p.system_prompt.slice(0, 12) + '…' })),
        el('td', { text: p.team }), num(p.requests),
        num(p.prompt_cache_hit_tokens, 'hit'), num(p.prompt_cache_miss_tokens, 'miss'),
        el('td', { class: 'num', text: rate(p.prompt_cache_hit_tokens, p.prompt_tokens) }),
        el('td', { class: 'num' }, money(p.cost_total, 'prompt-cost')),
        el('td', { class: 'num' }, money(p.cache_savings, 'prompt-savings', 'good'))));
    }
    if (!o.system_prompts.length) {
      body.append(el('tr', {}, el('td', { colspan: 8, class: 'muted', text: 'no requests with a system prompt in this range' })));
    }
    $('prompt-count').textContent = o.system_prompt_count > o.system_prompts.length
      ? '(top ' + o.system_prompts.length + ' of ' + o.system_prompt_count + ')' : '';
    $('prompts-table').replaceChildren(head('Fingerprint', 'Team', '#Uses', '#Hit tokens', '#Miss tokens', '#Hit rate',
                                            '#Cost', '#Saved'), body);
  }

  // ------------------------------------------------------------ why misses

  // billing::MissCause's order, as the usage API names the causes.
  const CAUSES = ['new', 'evicted', 'model_changed', 'in_flight', 'recomputed', 'partial_block', 'uncached'];
  const CAUSE_TEXT = { new: 'new', evicted: 'evicted', model_changed: 'model changed', in_flight: 'in flight',
                       recomputed: 'recomputed', partial_block: 'last block', uncached: 'uncached' };
  const REGIONS = ['system', 'tools', 'history', 'input'];
  const REGION_TEXT = { system: 'inside the system prompt', tools: 'inside the tool definitions',
                        history: 'in the conversation history', input: 'in the new input' };

  const sumOf = (counts, names) => names.reduce((s, n) => s + counts[n], 0);
  const percent = (n, total) => Math.round(100 * n / total) + '%';
  // "62% evicted, 30% new": the parts with tokens, the largest first.
  function shares(counts, names, text) {
    const total = sumOf(counts, names);
    return names.filter((n) => counts[n] > 0).sort((a, b) => counts[b] - counts[a])
      .map((n) => percent(counts[n], total) + ' ' + text(n)).join(', ');
  }

  // The causes as one stacked bar, each part titled with its tokens.
  function causeBar(byCause) {
    const width = 180, total = sumOf(byCause, CAUSES);
    const node = svg('svg', { class: 'causes', viewBox: `0 0 ${width} 12`, role: 'img', 'aria-label': 'miss tokens by cause' });
    node.append(svg('rect', { class: 'cause-empty', x: 0, y: 0, width, height: 12 }));
    let x = 0;
    for (const c of CAUSES) {
      if (!byCause[c]) continue;
      const w = width * byCause[c] / total;
      node.append(titled(svg('rect', { class: 'cause-' + c, x: x.toFixed(2), y: 0, width: w.toFixed(2), height: 12 }),
                         int(byCause[c]) + ' tokens ' + CAUSE_TEXT[c]));
      x += w;
    }
    return node;
  }

  // For the viewer's scope (its team, or every team), each team (the
  // admin's), each key and each system prompt shown above: the miss tokens
  // split by cause and by where the requests' first miss lies. Rows with no
  // recorded anatomy are left out.
  function whyTable(o) {
    const scopes = [{ kind: 'total', id: '', label: o.viewer.role === 'admin' ? 'every team' : 'team ' + o.viewer.team, row: o.totals }];
    for (const t of o.teams ?? []) scopes.push({ kind: 'team', id: t.team, label: 'team ' + t.team, row: t });
    for (const k of o.keys) scopes.push({ kind: 'key', id: k.key_id, label: 'key ' + (k.key_name ?? '(revoked)'), sub: k.team, row: k });
    for (const p of o.system_prompts) {
      scopes.push({ kind: 'system_prompt', id: p.system_prompt, label: 'prompt ' + p.system_prompt.slice(0, 12) + '…', sub: p.team, row: p });
    }
    const body = el('tbody');
    for (const s of scopes) {
      const byCause = s.row.miss_tokens_by_cause, byRegion = s.row.miss_tokens_by_first_region;
      const withCause = sumOf(byCause, CAUSES);
      if (!withCause) continue;
      const attrs = { 'data-testid': 'why-row', 'data-kind': s.kind, 'data-id': s.id, 'data-tokens': withCause };
      for (const c of CAUSES) attrs['data-cause-' + c] = byCause[c];
      for (const r of REGIONS) attrs['data-region-' + r] = byRegion[r];
      body.append(el('tr', attrs,
        el('td', {}, el('span', { class: 'strong', text: s.label }), s.sub ? el('span', { class: 'muted', text: ' ' + s.sub }) : null),
        num(withCause, 'miss'),
        el('td', { class: 'why' }, causeBar(byCause), el('br'),
           el('span', { 'data-testid': 'why-causes', text: shares(byCause, CAUSES, (c) => CAUSE_TEXT[c]) })),
        el('td', { class: 'why', 'data-testid': 'why-regions',
                   text: sumOf(byRegion, REGIONS) ? shares(byRegion, REGIONS, (r) => 'start ' + REGION_TEXT[r]) : '–' })));
    }
    if (!body.children.length) {
      body.append(el('tr', {}, el('td', { colspan: 4, class: 'muted', text: 'no miss anatomies recorded in this range' })));
    }
    $('why-table').replaceChildren(head('Scope', '#Miss tokens', 'By cause', 'Where the first miss lies'), body);
    $('why-legend').replaceChildren(...CAUSES.map((c) => el('span', {}, el('i', { class: 'sw cause-' + c }), CAUSE_TEXT[c])));
  }

  // "90 s", "12 min", "3 h", "2 d".
  function ago(ms) {
    const s = ms / 1000;
    if (s < 120) return Math.round(s) + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    if (s < 172800) return Math.round(s / 3600) + ' h';
    return Math.round(s / 86400) + ' d';
  }

  // A request's anatomy in a line or two: what hit where, then where the
  // first miss lies and why.
  function anatomyCell(e) {
    const m = e.miss;
    const td = el('td', { class: 'anatomy', 'data-testid': 'recent-anatomy' },
      el('span', { text: 'hit ' + int(e.prompt_cache_hit_tokens_memory) + ' pool · ' + int(e.prompt_cache_hit_tokens_disk) + ' disk' }),
      el('br'));
    if (!m) return td.append(el('span', { text: 'not recorded' })), td;
    td.dataset.cause = m.first_miss_cause;
    td.dataset.firstToken = m.first_miss_token;
    let where = 'first miss at token ' + int(m.first_miss_token);
    if (m.first_miss_message !== null) where += ' in message ' + m.first_miss_message;
    if (m.first_miss_region !== null) where += ' (' + m.first_miss_region + ')';
    let why = CAUSE_TEXT[m.first_miss_cause];
    if (m.first_miss_cause === 'evicted') why += ' from the ' + m.evicted_tier + ' ' + ago(m.evicted_ago_ms) + ' ago';
    td.append(el('span', { 'data-testid': 'recent-first-miss', text: where + ': ' + why }));
    return td;
  }

  // Prefix breakers (docs/cache.md, "Prefix breakers"): shown when there is one.
  function breakersTable(o) {
    const rows = o.prefix_breakers ?? [];
    $('breakers-panel').hidden = !rows.length;
    const body = el('tbody');
    for (const b of rows) {
      const d = b.divergence;
      const where = (d.message === null ? 'token ' + d.token : 'message ' + d.message + ', token ' + d.message_token) +
        ' (' + d.part + ')';
      const advice = el('td', { class: 'advice' }, el('div', { text: b.advice }));
      if (b.snippet !== undefined) advice.append(el('code', { 'data-testid': 'breaker-snippet', text: b.snippet }));
      body.append(el('tr', { 'data-testid': 'breaker-row', 'data-key-id': b.key_id, 'data-part': d.part,
                             'data-message': d.message, 'data-message-token': d.message_token },
        el('td', {}, el('span', { text: b.key_name ?? b.key_id }), el('span', { class: 'muted', text: ' ' + b.team })),
        el('td', { text: where }), num(b.flagged_requests), num(b.common_tokens),
        el('td', { class: 'num' }, money(b.saving_per_day, 'breaker-saving', 'good')), advice));
    }
    $('breakers-table').replaceChildren(head('Key', 'Divergence', '#Flagged', '#Tokens found again', '#Saving/day',
                                             'Advice'), body);
  }

  function recentTable(o) {
    const body = el('tbody');
    for (const e of o.recent) {
      body.append(el('tr', { 'data-testid': 'recent-row', 'data-request-id': e.request_id, 'data-team': e.team },
        el('td', { text: localTime(e.start_us / 1e6) }),
        el('td', {}, el('span', { text: e.key_name ?? e.key_id }), el('span', { class: 'muted', text: ' ' + e.team })),
        el('td', { text: e.model }),
        el('td', { text: e.endpoint.replace('/v1/', '') }),
        el('td', {}, el('span', { class: 'pill ' + e.status, text: e.status })),
        num(e.prompt_cache_hit_tokens, 'hit'), num(e.prompt_cache_miss_tokens, 'miss'), num(e.completion_tokens),
        el('td', { class: 'num', text: e.ttft_ms === null ? '–' : e.ttft_ms.toFixed(0) + ' ms' }),
        el('td', { class: 'num' }, money(e.cost_total, 'recent-cost')),
        anatomyCell(e)));
    }
    if (!o.recent.length) body.append(el('tr', {}, el('td', { colspan: 11, class: 'muted', text: 'no requests in this range' })));
    $('recent-table').replaceChildren(head('Time', 'Key', 'Model', 'Endpoint', 'Status', '#Hit', '#Miss', '#Output',
                                           '#TTFT', '#Cost', 'Why it missed'), body);
  }

  // ------------------------------------------------------------ start

  document.addEventListener('DOMContentLoaded', () => {
    $('signin-form').addEventListener('submit', signIn);
    $('signout').addEventListener('click', signOut);
    $('range').addEventListener('change', () => { ++generation; load(); });
    document.addEventListener('visibilitychange', () => { if (!document.hidden && document.body.dataset.state === 'ready') load(); });
    start();
  });

  // Signed in already (the session cookie)? Then the board, else the form.
  async function start() {
    let r = null;
    try { r = await api('GET', '/dashboard/session'); } catch (e) { r = null; }
    if (r && r.status === 200 && r.data.viewer) return load();
    document.body.dataset.signedIn = 'no';
    show('signin');
    $('signin-key').focus();
  }
})();
