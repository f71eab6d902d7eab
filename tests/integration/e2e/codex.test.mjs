// Codex CLI (@openai/codex, pinned in package.json) against `latentgate serve`
// through a custom model provider speaking the Responses API, as a user would
// configure it: base_url, env_key and wire_api = "responses", the local CA
// trusted through CODEX_CA_CERTIFICATE. A turn must complete without a
// protocol error, and a resumed conversation's request must hit the cache on
// the earlier prompt (Codex sends store: false and resends the whole
// conversation, so the hit comes from the prefix cache, not stored state).
// With random weights the replies are noise; the protocol is what is tested.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { server as connect } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const codexBin = path.join(here, 'node_modules', '.bin', 'codex');
const kBlockTokens = 64;  // the prefix cache's block size (cache.block_tokens, default 64)

let server, home, work, key;

before(async () => {
  server = connect();
  key = await server.createKey('team-codex', 'codex e2e');
  home = mkdtempSync(path.join(tmpdir(), 'lg-codex-home-'));
  work = mkdtempSync(path.join(tmpdir(), 'lg-codex-work-'));
  writeFileSync(path.join(home, 'config.toml'), [
    `model = "${server.model}"`,
    'model_provider = "latentgate"',
    '[model_providers.latentgate]',
    'name = "LatentGate"',
    `base_url = "${server.url}/v1"`,
    'env_key = "LATENTGATE_API_KEY"',
    'wire_api = "responses"',
    '',
  ].join('\n'));
  process.on('exit', () => { rmSync(home, { recursive: true, force: true }); rmSync(work, { recursive: true, force: true }); });
});

// Runs `codex exec ... --json` and returns its JSON events.
function codex(args) {
  const r = spawnSync(codexBin, ['exec', '--skip-git-repo-check', '--json', ...args], {
    cwd: work,
    input: '',
    encoding: 'utf8',
    timeout: 240_000,
    env: {
      ...process.env,
      CODEX_HOME: home,
      LATENTGATE_API_KEY: key,
      CODEX_CA_CERTIFICATE: process.env.NODE_EXTRA_CA_CERTS,
    },
  });
  assert.equal(r.status, 0, `codex ${args.join(' ')} exited ${r.status}\n${r.stdout}\n${r.stderr}`);
  return r.stdout.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

function completedTurn(events) {
  const failures = events.filter((e) => e.type === 'error' || e.type === 'turn.failed');
  assert.deepEqual(failures, [], JSON.stringify(events));
  const done = events.find((e) => e.type === 'turn.completed');
  assert.ok(done, JSON.stringify(events));
  assert.ok(events.some((e) => e.type === 'item.completed' && e.item.type === 'agent_message'), JSON.stringify(events));
  return done.usage;
}

test('codex exec completes a turn, and the resumed conversation hits the cache', () => {
  const first = completedTurn(codex(['Say hello']));
  assert.ok(first.input_tokens > 1000, `Codex's prompt: ${first.input_tokens} tokens`);
  assert.ok(first.output_tokens > 0);
  const second = completedTurn(codex(['resume', '--last', 'And again']));
  assert.ok(second.input_tokens > first.input_tokens);
  // Every whole block of the earlier prompt comes from the cache.
  const earlierBlocks = Math.floor((first.input_tokens - 1) / kBlockTokens) * kBlockTokens;
  assert.ok(second.cached_input_tokens >= earlierBlocks,
    `cached ${second.cached_input_tokens} of ${second.input_tokens}; the earlier prompt was ${first.input_tokens}`);
});
