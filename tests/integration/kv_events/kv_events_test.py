#!/usr/bin/python3
"""End to end: three `latentgate serve` replicas publishing vLLM-format KV events, read
by an independent subscriber and an llm-d re-implementation (llmd_index.py).

    /usr/bin/python3 kv_events_test.py --latentgate build/cli/latentgate [--keep]

Each replica runs the demo model in a private temp dir (its own data dir, CA and
loopback ports) with cache.kv_events on and re-announcement every 500 ms: r0 binds
its PUB socket ("bind": true); r1 has no "bind", so by vLLM's rule it connects to
the subscriber, which binds (llm-d's central mode); r2 uses the map encoding, writes
every block to its disk tier, keeps 12 blocks in tier 0 and always restores. Checks:

  1. every live message decodes, validates as vLLM's layout (array or map, as
     configured), re-encodes byte for byte with python msgpack, keeps LatentGate's
     contract (8 fields, block size 64, 64 token ids per block, medium), carries
     the topic kv@127.0.0.1:<https port>@demo; seqs are contiguous per life; a block
     hash always comes with the same parent and tokens; the publisher's counters
     say nothing was dropped and every batch it counted arrived;
  2. replay from 0 starts with seq 0 = [AllBlocksCleared] and ends with the end marker;
  3. long shared system prompts (several 64-token blocks; keys of two teams) sent to
     chosen replicas are published as BlockStored chains whose token_ids equal the
     token ids of POST /v1/chat/completions/render (the full blocks);
  4. for the next turn of each conversation, the llm-d index (fed by events only,
     tokens rendered on another replica) picks the replica holding the longest
     prefix, and that replica reports at least those blocks as cached (capped at
     prompt - 1 tokens); another team's identical request is scored the same by
     the team-agnostic index but gets no hit from the engine (isolation holds);
  5. a late subscriber (no replay) learns the resident blocks by re-announcement:
     every event's parent is nil or announced earlier in its stream, and it scores
     the earlier prompts as the first subscriber does;
  6. r2: evictions come as BlockRemoved CPU while the DISK copies keep r2's score,
     and the restore that the engine then reports is announced on CPU again;
  7. after SIGTERM and a start on the same ports and data dir, a replica's stream
     restarts at seq 0 with AllBlocksCleared (replay; the live subscriber sees the
     seq go back) and what it computes next is announced and scored again.

Soft checks only warn: that a request's prompt blocks are first announced in one
BlockStored (the contract says so; the publisher merges what its queue holds), and
that /metrics has vLLM's names for routers (router_surface_test owns those).

Exit status 0 when every check passed, 1 otherwise; the replicas are stopped (by pid)
in any case (they die with the test too: PR_SET_PDEATHSIG). 5 to 10 s on 2 cores.
"""

import argparse
import ctypes
import http.client
import json
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llmd_index as L  # noqa: E402

MODEL = "demo"
BLOCK = L.BLOCK_SIZE
REANNOUNCE_MS = 500
# The demo model's latent block: 64 tokens x 4 layers x (kv_lora 128 + rope 32) f32 values.
DEMO_BLOCK_BYTES = 64 * 4 * 160 * 4
R2_TIER0_BLOCKS = 12
T0 = time.monotonic()

# ---------------------------------------------------------------------------
# Reporting

FAILURES = []
WARNINGS = []
PASSES = [0]


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def check(cond, what, detail="", soft=False):
    """A failed soft check is a warning: reported, not failing the run."""
    if not cond and soft:
        WARNINGS.append(what + (": " + detail if detail else ""))
        log("WARN " + what + (": " + detail if detail else ""))
        return False
    if cond:
        PASSES[0] += 1
        log("ok   " + what)
    else:
        FAILURES.append(what + (": " + detail if detail else ""))
        log("FAIL " + what + (": " + detail if detail else ""))
    return bool(cond)


# ---------------------------------------------------------------------------
# Replicas

def _die_with_parent():
    """In the child before exec: SIGTERM when the test process dies, even by SIGKILL (a
    ctest timeout), so that no replica outlives it (prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, index, binary, admin_key, encoding, cache=None, bind=True):
        self.index = index
        self.name = "r%d" % index
        self.binary = binary
        self.admin_key = admin_key
        self.encoding = encoding
        self.dir = tempfile.mkdtemp(prefix="lg_kvevents_%d_" % index)
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.pub_port = free_port()
        self.replay_port = free_port()
        self.proc = None
        self.log_path = os.path.join(self.dir, "serve.log")
        self.log_offset = 0
        self.keys = {}  # team -> API key
        self.cache = cache or {}  # more cache options
        self.bind = bind  # kv_events.bind; None: absent (vLLM's rule: no '*' in the endpoint, so connect)

    @property
    def pub(self):
        return "tcp://127.0.0.1:%d" % self.pub_port

    @property
    def replay(self):
        return "tcp://127.0.0.1:%d" % self.replay_port

    @property
    def topic(self):
        return ("kv@127.0.0.1:%d@%s" % (self.port, MODEL)).encode()

    def config(self):
        return {
            "data_dir": self.data,
            "admin_key": self.admin_key,
            "log": {"level": "info"},
            "engine": {"threads": 1, "max_context": 4096},
            "server": {"listen": "127.0.0.1:%d" % self.port, "io_threads": 1},
            "cache": dict(self.cache, kv_events=dict({
                "endpoint": self.pub,
                "replay_endpoint": self.replay,
                "encoding": self.encoding,
                "reannounce_interval_ms": REANNOUNCE_MS,
            }, **({} if self.bind is None else {"bind": self.bind}))),
        }

    def start(self):
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump(self.config(), f, indent=2)
        self.log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "serve", "--config", os.path.join(self.dir, "config.json")],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        out.close()

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def wait_serving(self, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if "LatentGate is serving" in self.log_tail(1 << 20):
                return True
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s:\n%s" % (self.name, self.proc.returncode, self.log_tail()))
            time.sleep(0.05)
        raise RuntimeError("%s did not start in %d s:\n%s" % (self.name, timeout, self.log_tail()))

    def stop(self, sig=signal.SIGTERM, timeout=20):
        p = self.proc
        if p is None or p.poll() is not None:
            return p.returncode if p else None
        try:
            os.kill(p.pid, sig)
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            return p.wait(10)
        except ProcessLookupError:
            return None

    # HTTPS
    def call(self, method, path, bearer, body=None, timeout=120):
        ctx = ssl.create_default_context(cafile=os.path.join(self.data, "tls", "ca.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=timeout)
        try:
            headers = {"authorization": "Bearer " + bearer}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["content-type"] = "application/json"
            conn.request(method, path, data, headers)
            r = conn.getresponse()
            raw = r.read()
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw.decode("utf-8", "replace")
        finally:
            conn.close()

    def metrics(self):
        """GET /metrics: {(name, labels text): value}."""
        st, body = self.call("GET", "/metrics", self.admin_key)
        if st != 200 or not isinstance(body, str):
            raise RuntimeError("%s: GET /metrics %s" % (self.name, st))
        out = {}
        for line in body.splitlines():
            if not line or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            name, _, labels = head.partition("{")
            try:
                out[(name, labels.rstrip("}"))] = float(value)
            except ValueError:
                pass
        return out

    def make_key(self, team):
        st, j = self.call("POST", "/admin/keys", self.admin_key, {"team": team, "name": "kv-" + team})
        if st != 200 or not isinstance(j, dict) or "key" not in j:
            raise RuntimeError("%s: POST /admin/keys %s: %s" % (self.name, st, j))
        self.keys[team] = j["key"]

    def render(self, team, messages):
        st, j = self.call("POST", "/v1/chat/completions/render", self.keys[team],
                          {"model": MODEL, "messages": messages})
        if st != 200 or not isinstance(j, dict) or not isinstance(j.get("token_ids"), list):
            raise RuntimeError("%s: render %s: %s" % (self.name, st, str(j)[:500]))
        return j["token_ids"]

    def chat(self, team, messages, max_tokens=4):
        st, j = self.call("POST", "/v1/chat/completions", self.keys[team],
                          {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0})
        if st != 200 or not isinstance(j, dict):
            raise RuntimeError("%s: chat %s: %s" % (self.name, st, str(j)[:500]))
        u = j["usage"]
        return {"prompt": u["prompt_tokens"], "cached": u["prompt_tokens_details"]["cached_tokens"],
                "text": j["choices"][0]["message"].get("content") or ""}


# ---------------------------------------------------------------------------
# Prompts

WORDS = ("account agent answer archive audit batch billing budget cache channel client cluster commit config "
         "context cost credential customer dashboard data deploy document engine error event export file "
         "gateway history index invoice key ledger limit log message metric model namespace network order "
         "owner policy price prompt queue record region replica report request response role route rule "
         "schema secret server service session shard source status storage stream system table team tenant "
         "ticket token tool trace user value vendor version window worker workflow").split()


def text(seed, n):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        w = rnd.choice(WORDS)
        out.append(w + ("." if i % 12 == 11 else ""))
    return " ".join(out)


def system_prompt(i):
    return ("You are support agent %d of a billing platform. Follow the policy below exactly. " % i) + text(
        "system-%d" % i, 330)


def user(seed, n=90):
    return "Question %s: %s?" % (seed, text("user-" + seed, n))


# ---------------------------------------------------------------------------
# Reading the streams

def blocks_of(feed):
    """Per-block view of a feed's BlockStored events: hash -> (parent hash or None, 64 tokens)."""
    out = {}
    for _, msg, _ in feed.log:
        for e in msg.batch.events:
            if e.type != "BlockStored" or len(e.token_ids) != BLOCK * len(e.block_hashes):
                continue
            parent = e.parent_block_hash
            for i, h in enumerate(e.block_hashes):
                out[h] = (parent, tuple(e.token_ids[i * BLOCK:(i + 1) * BLOCK]))
                parent = h
    return out


def block_contexts(feed, into=None):
    """Every (parent, tokens) each block hash was announced with, over a feed's whole log
    (restarts split it: a hash may come back after AllBlocksCleared, with the same context)."""
    out = {} if into is None else into
    for _, msg, _ in feed.log:
        for e in msg.batch.events:
            if e.type != "BlockStored" or len(e.token_ids) != BLOCK * len(e.block_hashes):
                continue
            parent = e.parent_block_hash
            for i, h in enumerate(e.block_hashes):
                out.setdefault(h, set()).add((parent, tuple(e.token_ids[i * BLOCK:(i + 1) * BLOCK])))
                parent = h
    return out


def check_block_identity(feeds, what):
    """A block hash names one block: its parent and tokens never change, whoever announces it
    (a live publish, a restore, the disk writer, a re-announcement). A block re-announced as a
    root while its parent exists would map to another llm-d request key than before."""
    for f in feeds:
        ctx = block_contexts(f)
        bad = {h: sorted((p, len(t)) for p, t in v) for h, v in ctx.items() if len(v) > 1}
        check(not bad, "%s %s: each of %d block hashes always comes with the same parent and tokens"
              % (what, f.name, len(ctx)), "hash -> (parent, n tokens): %s" % list(bad.items())[:3])


def chains_covering(blocks, ids):
    """Chains of announced blocks (from a nil parent) whose tokens are ids' leading blocks.
    Returns (depth, [hash tuples of that depth])."""
    children = {}
    for h, (p, toks) in blocks.items():
        children.setdefault(p, []).append((h, toks))
    chains = [()]
    depth = 0
    while (depth + 1) * BLOCK <= len(ids):
        want = tuple(ids[depth * BLOCK:(depth + 1) * BLOCK])
        nxt = [c + (h,) for c in chains for (h, toks) in children.get(c[-1] if c else None, ()) if toks == want]
        if not nxt:
            break
        chains, depth = nxt, depth + 1
    return depth, (chains if depth else [])


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def contiguous_lives(feed):
    """The log's seqs split into lives (a lower seq starts a new one); each must be contiguous."""
    lives, cur = [], []
    for seq, _, _ in feed.log:
        if cur and seq <= cur[-1]:
            lives.append(cur)
            cur = []
        cur.append(seq)
    if cur:
        lives.append(cur)
    bad = [(life[0], life[-1]) for life in lives if life != list(range(life[0], life[0] + len(life)))]
    return lives, bad


def check_replay_from_zero(r, what):
    got, ended = L.replay(r.replay, 0, timeout=10)
    ok = check(ended, "%s: replay from 0 ends with the end marker ffffffffffffffff" % what)
    if not got:
        return check(False, "%s: replay from 0 returns batches" % what)
    seqs = [s for s, _ in got]
    check(seqs[0] == 0 and seqs == list(range(len(seqs))), "%s: replay seqs are 0..%d, contiguous" % (what, len(seqs) - 1),
          "got %s" % seqs[:10])
    try:
        first = L.decode_payload(got[0][1], r.encoding)
        ok &= check([e.type for e in first.events] == ["AllBlocksCleared"],
                    "%s: replayed seq 0 is [AllBlocksCleared]" % what, repr(first.events))
    except L.FormatError as e:
        ok &= check(False, "%s: replayed seq 0 decodes" % what, str(e))
    bad = []
    for seq, payload in got:
        try:
            L.decode_payload(payload, r.encoding)
        except L.FormatError as e:
            bad.append("seq %d: %s" % (seq, e))
    check(not bad, "%s: all %d replayed batches validate and re-encode byte-exactly" % (what, len(got)),
          "; ".join(bad[:3]))
    req = L.replay_first_with_req(r.replay, 0)
    check(req is not None and req[0] == 0, "%s: a REQ client's replay starts at seq 0" % what, repr(req and req[0]))
    return ok


# ---------------------------------------------------------------------------
# The test

def run(binary, keep):
    admin = secrets.token_urlsafe(32)
    # r2 writes every computed block to the disk tier (BlockStored DISK), keeps only a few
    # blocks in tier 0 (evictions: BlockRemoved CPU) and always restores from disk.
    r2_cache = {"write_through_hits": 0, "tier0_budget_bytes": R2_TIER0_BLOCKS * DEMO_BLOCK_BYTES,
                "restore_policy": "always"}
    # r1 has no "bind": by vLLM's rule its PUB connects to tcp://127.0.0.1:port, where the
    # first subscriber binds (llm-d's central mode); the late subscriber reads r0 and r2.
    replicas = [Replica(0, binary, admin, "array"), Replica(1, binary, admin, "array", bind=None),
                Replica(2, binary, admin, "map", r2_cache)]
    sub = late = None
    try:
        # --- start: the first replica writes the demo model; the others get hard links to it.
        replicas[0].start()
        replicas[0].wait_serving()
        demo = os.path.join(replicas[0].data, "models", "demo")
        for r in replicas[1:]:
            dst = os.path.join(r.data, "models", "demo")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                shutil.copytree(demo, dst, copy_function=os.link)
            except OSError:
                shutil.copytree(demo, dst)
            r.start()
        for r in replicas[1:]:
            r.wait_serving()
        log("3 replicas serving on ports %s" % [r.port for r in replicas])
        for r in replicas:
            r.make_key("team-a")
            r.make_key("team-b")

        # --- the first subscriber, joined before any traffic; with catch-up, seq 0 comes by replay.
        index = L.Index()
        feeds = [L.Feed(r.name, r.pub, r.replay, r.encoding, bind=r.bind is None) for r in replicas]
        sub = L.Subscriber(index, feeds, catch_up=True, contract={}).start()
        by_name = {f.name: f for f in feeds}
        names = [r.name for r in replicas]
        # Re-announcement sends nothing while nothing is resident: the first request per replica
        # below is what the subscriber first sees, and then it fetches seq 0 from the replay socket.

        for r in replicas:
            check_replay_from_zero(r, r.name)

        # completions render: vLLM's shape, a JSON array whose first element has token_ids.
        st, j = replicas[0].call("POST", "/v1/completions/render", replicas[0].keys["team-a"],
                                 {"model": MODEL, "prompt": "Hello there, general " + text("p", 20)})
        check(st == 200 and isinstance(j, list) and j and isinstance(j[0].get("token_ids"), list)
              and len(j[0]["token_ids"]) > 20,
              "POST /v1/completions/render answers [{token_ids: [...]}, ...]", "%s %s" % (st, str(j)[:300]))

        # --- seed: conversations with long system prompts on chosen replicas.
        S = {i: system_prompt(i) for i in (1, 2, 3)}
        conv = {
            "c1": ("team-a", 0, [{"role": "system", "content": S[1]}, {"role": "user", "content": user("c1")}]),
            "c1s": ("team-a", 1, [{"role": "system", "content": S[1]}, {"role": "user", "content": user("c1s", 20)}]),
            "c2": ("team-a", 1, [{"role": "system", "content": S[2]}, {"role": "user", "content": user("c2")}]),
            "c3": ("team-b", 2, [{"role": "system", "content": S[3]}, {"role": "user", "content": user("c3")}]),
        }
        first_ids, replies = {}, {}
        for name, (team, at, msgs) in conv.items():
            r = replicas[at]
            ids = r.render(team, msgs)
            first_ids[name] = ids
            t = time.monotonic()
            u = r.chat(team, msgs)
            replies[name] = u["text"]
            check(u["prompt"] == len(ids), "%s: render gives the %d ids chat completions counts (%d)"
                  % (name, len(ids), u["prompt"]))
            full = len(ids) // BLOCK
            got = sub.wait_for(lambda: index.longest_prefix(ids, MODEL, names)[r.name] >= full, 10)
            check(got, "%s on %s (%s, %d tokens, %d full blocks): the index holds them (%.2f s after the request)"
                  % (name, r.name, team, len(ids), full, time.monotonic() - t),
                  "scores %s" % index.longest_prefix(ids, MODEL, names))
            with index.lock:
                depth, chains = chains_covering(blocks_of(by_name[r.name]), ids)
            check(depth == full, "%s: %s's BlockStored token_ids chain equals the render's first %d blocks"
                  % (name, r.name, full), "depth %d" % depth)
            if depth:
                first = None
                with index.lock:
                    for _, msg, _ in by_name[r.name].log:
                        first = next((e for e in msg.batch.events
                                      if e.type == "BlockStored" and chains[0][0] in e.block_hashes), None)
                        if first:
                            break
                # The contract groups one publish's blocks in one event; the publisher merges
                # what its queue holds when it wakes, so this is reported, not enforced.
                check(first is not None and list(first.block_hashes[:full]) == list(chains[0])
                      and first.parent_block_hash is None,
                      "%s: its %d prompt blocks were first announced together, in one BlockStored from the root"
                      % (name, full), "the first event with its root block has blocks %s of the chain"
                      % ([chains[0].index(h) if h in chains[0] else h for h in first.block_hashes] if first else None),
                      soft=True)
        with index.lock:
            for f in feeds:
                check(f.topic == replicas[names.index(f.name)].topic, "%s: topic %r" % (f.name, f.topic))

        # --- routing: the next turn of each conversation, rendered on another replica.
        turn2 = {}
        for name in ("c1", "c2", "c3"):
            team, at, msgs = conv[name]
            turn2[name] = (team, at, msgs + [{"role": "assistant", "content": replies[name]},
                                             {"role": "user", "content": user(name + "-2", 40)}])
        scored = {}
        for name, (team, at, msgs) in turn2.items():
            ids = replicas[(at + 1) % 3].render(team, msgs)
            scores = index.longest_prefix(ids, MODEL, names)
            best, blocks = index.best(ids, MODEL, names)
            shared = common_prefix(first_ids[name], ids) // BLOCK
            scored[name] = (ids, scores)
            check(best == replicas[at].name and blocks >= shared,
                  "%s turn 2: the index picks %s with %d blocks (turn 1 shares %d full blocks)"
                  % (name, best, blocks, shared), "scores %s, expected %s" % (scores, replicas[at].name))
            if name == "c1":
                check(scores["r0"] > scores["r1"] > 0 and scores["r2"] == 0,
                      "c1 turn 2: r0 (the whole turn 1) scores above r1 (the system prompt only) above r2",
                      str(scores))
            u = replicas[at].chat(team, msgs)
            cap = (u["prompt"] - 1) // BLOCK
            want = min(blocks, cap) * BLOCK
            check(u["cached"] >= want, "%s turn 2 on %s: cached_tokens %d >= %d (index %d blocks, cap %d)"
                  % (name, replicas[at].name, u["cached"], want, blocks, cap))

        # --- isolation: team-b sends team-a's c1 turn 2 to r0.
        ids, scores = scored["c1"]
        r0 = replicas[0]
        with index.lock:
            before = blocks_of(by_name["r0"])
        depth_a, chains_a = chains_covering(before, ids)
        check(len(chains_a) == 1, "c1 turn 2 on r0: one announced chain (team-a's) before team-b's request",
              "%d chains" % len(chains_a))
        full = len(ids) // BLOCK
        ids_b = r0.render("team-b", turn2["c1"][2])
        check(ids_b == ids, "team-b's render of the same messages gives team-a's ids")
        best, blocks = index.best(ids_b, MODEL, names)
        check(best == "r0" and blocks == full,
              "team-b's identical request is scored on r0 with all %d blocks (team-agnostic): %s"
              % (full, index.longest_prefix(ids_b, MODEL, names)))
        u = r0.chat("team-b", turn2["c1"][2])
        check(u["cached"] == 0, "team-b on r0: no hit from team-a's blocks (cached_tokens %d of %d)"
              % (u["cached"], u["prompt"]))

        def two_chains():
            d, ch = chains_covering(blocks_of(by_name["r0"]), ids)
            return len(ch) >= 2 and d >= full
        check(sub.wait_for(two_chains, 10), "team-b's blocks on r0 are announced with the same token_ids")
        with index.lock:
            d, chains = chains_covering(blocks_of(by_name["r0"]), ids)
        if len(chains) >= 2:
            a, b = chains[0], chains[1]
            check(not set(a) & set(b), "team-a's and team-b's chains share no block hash (per-team namespaces)")

        # --- the late subscriber: no replay, only re-announcement.
        late_index = L.Index()
        late_feeds = [L.Feed(r.name, r.pub, None, r.encoding) for r in replicas if r.bind]
        late_names = [f.name for f in late_feeds]
        late = L.Subscriber(late_index, late_feeds, catch_up=False, contract={}).start()
        prompts = {n: v[0] for n, v in scored.items()}
        prompts.update(first_ids)
        t = time.monotonic()

        def main_view(p):
            return {k: v for k, v in index.longest_prefix(p, MODEL, names).items() if k in late_names}

        def late_agrees():
            return all(late_index.longest_prefix(p, MODEL, late_names) == main_view(p) for p in prompts.values())
        agreed = late.wait_for(late_agrees, 4 * REANNOUNCE_MS / 1000 + 5)
        check(agreed, "late subscriber to %s scores all %d earlier prompts as the first one does (%.2f s)"
              % (late_names, len(prompts), time.monotonic() - t),
              "; ".join("%s late %s vs %s" % (n, late_index.longest_prefix(p, MODEL, late_names), main_view(p))
                        for n, p in prompts.items()))
        late.wait_for(lambda: False, REANNOUNCE_MS / 1000 * 1.5)  # at least one more full round
        late.stop()
        with index.lock:
            main_ctx = {}
            for f in feeds:
                if f.name in late_names:
                    block_contexts(f, main_ctx)
        for f in late_feeds:
            late_ctx = block_contexts(f)
            differ = [h for h, v in late_ctx.items() if not v <= main_ctx.get(h, set())]
            check(not differ, "%s late stream: its %d re-announced blocks have the parents and tokens first announced"
                  % (f.name, len(late_ctx)), "%d differ, e.g. %s" % (len(differ), differ[:3]))
        check_block_identity(late_feeds, "late")
        for f in late_feeds:
            # The stream may begin in the middle of a re-announcement round (a round may take
            # several batches): orphans are allowed in the first round only, the batches whose
            # ts lie within 200 ms of the first one.
            announced, orphans, events, early = set(), [], 0, 0
            first_ts = f.log[0][1].batch.ts if f.log else 0
            for seq, msg, _ in f.log:
                in_first_round = msg.batch.ts - first_ts < 0.2
                for e in msg.batch.events:
                    if e.type != "BlockStored":
                        continue
                    events += 1
                    p = e.parent_block_hash
                    if p is not None and p not in announced:
                        if in_first_round:
                            early += 1
                        else:
                            orphans.append((seq, p))
                    announced.update(e.block_hashes)
            check(events > 0 and not orphans,
                  "%s late stream: %d BlockStored, each parent nil or announced before it (%d orphans in the "
                  "first, joined round)" % (f.name, events, early), "orphans %s" % orphans[:5])
            check(not f.errors, "%s late stream: %d messages valid" % (f.name, f.received), str(f.errors[:3]))
            if f.log:
                last = f.log[-1][1].batch
                log("%s: the last re-announcement batch: %d events, %d blocks, %d roots"
                    % (f.name, len(last.events), sum(len(e.block_hashes) for e in last.events if e.type == "BlockStored"),
                       sum(1 for e in last.events if e.type == "BlockStored" and e.parent_block_hash is None)))
        late = None

        # --- evictions on r2: a new conversation pushes c3's blocks out of tier 0; their disk
        # copies stay announced (DISK), so the index still finds c3 on r2 and the engine restores it.
        r2 = replicas[2]
        c3_ids = scored["c3"][0]
        c3_full = len(c3_ids) // BLOCK
        with index.lock:
            c3_hashes = set(chains_covering(blocks_of(by_name["r2"]), c3_ids)[1][0])
            n_log = len(by_name["r2"].log)
        check(sub.wait_for(lambda: index.longest_prefix(c3_ids, MODEL, names)["r2"] == c3_full and all(
            ("r2", "disk") in index.where.get(rk, ()) for rk in L.request_keys(c3_ids, MODEL)[:c3_full]), 10),
            "r2 (write_through_hits 0): c3's %d blocks are announced on DISK too" % c3_full)
        S4 = system_prompt(4)
        c4 = [{"role": "system", "content": S4}, {"role": "user", "content": user("c4")}]
        r2.chat("team-a", c4)

        def evicted():
            gone = set()
            for _, msg, _ in by_name["r2"].log[n_log:]:
                for e in msg.batch.events:
                    if e.type == "BlockRemoved" and e.medium == "CPU":
                        gone.update(h for h in e.block_hashes if h in c3_hashes)
            return gone
        gone = sub.wait_for(evicted, 10)
        check(gone, "r2 (tier 0 budget %d blocks): c4 evicts c3 blocks, announced as BlockRemoved CPU (%d of %d)"
              % (R2_TIER0_BLOCKS, len(gone or ()), len(c3_hashes)))
        with index.lock:
            tiers = [sorted(m for (p, m) in index.where.get(rk, ()) if p == "r2")
                     for rk in L.request_keys(c3_ids, MODEL)[:c3_full]]
        check(any(t == ["disk"] for t in tiers) and all("disk" in t for t in tiers),
              "the index keeps c3 on r2 through the DISK tier: %s" % tiers)
        best, blocks = index.best(c3_ids, MODEL, names)
        u = r2.chat("team-b", turn2["c3"][2])
        want = min(blocks, (u["prompt"] - 1) // BLOCK) * BLOCK
        check(best == "r2" and u["cached"] >= want,
              "c3 turn 2 again on r2 (index: %s, %d blocks): cached_tokens %d >= %d, restored from disk"
              % (best, blocks, u["cached"], want))
        check(sub.wait_for(lambda: all("cpu" in [m for (p, m) in index.where.get(rk, ()) if p == "r2"]
                                       for rk in L.request_keys(c3_ids, MODEL)[:c3_full]), 10),
              "the restored blocks are announced on CPU again")

        # --- restart r1: SIGTERM, same ports and data dir.
        r1 = replicas[1]
        with index.lock:
            last_before = by_name["r1"].last_seq
        t = time.monotonic()
        rc = r1.stop(signal.SIGTERM)
        check(rc == 0, "r1 exits 0 on SIGTERM (%s, %.1f s)" % (rc, time.monotonic() - t))
        r1.start()
        r1.wait_serving()
        log("r1 restarted in %.1f s" % (time.monotonic() - t))
        check_replay_from_zero(r1, "r1 after restart")
        team, _, msgs = turn2["c2"]
        ids = scored["c2"][0]
        u = r1.chat(team, msgs)
        full = len(ids) // BLOCK
        restarted = sub.wait_for(lambda: len(by_name["r1"].restarts) > 0, 10)
        with index.lock:
            rs = list(by_name["r1"].restarts)
        check(restarted and rs[0][0] >= last_before and rs[0][1] < rs[0][0],
              "the live subscriber saw r1's seq go back (%s; last before %s)" % (rs, last_before))
        got = sub.wait_for(lambda: index.longest_prefix(ids, MODEL, names)["r1"] >= full, 10)
        check(got, "after the restart, c2 turn 2 on r1 (cached %d) is announced again: %d blocks"
              % (u["cached"], full), str(index.longest_prefix(ids, MODEL, names)))
        check(index.longest_prefix(first_ids["c1s"], MODEL, names)["r1"] == 0,
              "after the restart, the index no longer credits r1 with c1s's blocks")

        # --- the publisher's own counters: nothing dropped, every batch it counts reached us.
        for r in replicas:
            m = r.metrics()
            dropped = m.get(("latentgate_kv_events_dropped_total", ""))
            batches = m.get(("latentgate_kv_events_batches_total", ""))
            check(dropped == 0, "%s: latentgate_kv_events_dropped_total is 0 (%s)" % (r.name, dropped))
            f = by_name[r.name]
            reached = batches is not None and sub.wait_for(lambda: f.last_seq is not None and f.last_seq + 1 >= batches, 5)
            check(reached, "%s: the subscriber reached seq %s, latentgate_kv_events_batches_total - 1"
                  % (r.name, None if batches is None else int(batches) - 1), "last seq %s" % f.last_seq)
            names_present = {n for (n, _) in m}
            missing = [n for n in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                                   "vllm:cache_config_info") if n not in names_present]
            check(not missing, "%s: /metrics has vLLM's names for routers" % r.name, "missing %s" % missing, soft=True)

        # --- every live message, every seq.
        sub.wait_for(lambda: False, 0.3)
        sub.stop()
        totals = {}
        for f, r in zip(feeds, replicas):
            lives, bad = contiguous_lives(f)
            check(not f.errors, "%s (%s): %d live messages decode, validate, re-encode byte-exactly and keep the "
                  "contract" % (f.name, r.encoding, f.received), "; ".join(e[1] for e in f.errors[:5]))
            check(not bad and not f.gaps, "%s: seqs contiguous in each of %d lives %s"
                  % (f.name, len(lives), [(life[0], life[-1]) for life in lives]), "bad %s gaps %s" % (bad, f.gaps))
            kinds = {}
            for _, msg, _ in f.log:
                for e in msg.batch.events:
                    medium = e.fields.get("medium")
                    key = e.type + ("/" + medium if medium else "")
                    n_ev, n_blocks = kinds.get(key, (0, 0))
                    kinds[key] = (n_ev + 1, n_blocks + len(e.fields.get("block_hashes") or ()))
            totals[f.name] = kinds
        check_block_identity(feeds, "live")
        check(by_name["r2"].log and all(e.encoding == "map" for _, m, _ in by_name["r2"].log for e in m.batch.events),
              "r2's events are all in vLLM's map form")
        log("[events, blocks] per replica: %s" % json.dumps(totals))
        log("index counts: %s" % index.counts)
    except Exception as e:
        FAILURES.append("exception: %s" % e)
        traceback.print_exc()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        for s in (sub, late):
            if s is not None:
                s.stop()
        for r in replicas:
            try:
                r.stop(signal.SIGTERM)
            except Exception as e:  # keep stopping the others
                log("stopping %s: %s" % (r.name, e))
        if FAILURES:
            for r in replicas:
                print("---- %s serve.log (tail) ----\n%s" % (r.name, r.log_tail(3000)), file=sys.stderr)
        for r in replicas:
            if keep:
                log("kept %s" % r.dir)
            else:
                shutil.rmtree(r.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latentgate", required=True, help="the latentgate binary")
    ap.add_argument("--keep", action="store_true", help="keep the replicas' temp dirs")
    args = ap.parse_args()
    if not os.access(args.latentgate, os.X_OK):
        print("not an executable: %s" % args.latentgate, file=sys.stderr)
        return 2
    # SIGTERM/SIGINT (ctest's timeout, ^C): unwind so the finally block stops the replicas.
    def interrupted(signum, frame):
        raise KeyboardInterrupt()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, interrupted)
    try:
        run(os.path.abspath(args.latentgate), args.keep)
    except KeyboardInterrupt:
        FAILURES.append("interrupted")
    log("%d checks passed, %d failed, %d warnings" % (PASSES[0], len(FAILURES), len(WARNINGS)))
    for w in WARNINGS:
        print("WARNING: " + w, file=sys.stderr)
    for f in FAILURES:
        print("FAILED: " + f, file=sys.stderr)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
