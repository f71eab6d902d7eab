#!/usr/bin/python3
"""An independent reading of vLLM's KV-event stream, and llm-d's index over it.

Written from the protocol descriptions (docs in /work/shared/design/kv-events.md:
vLLM's vllm/distributed/kv_events.py, llm-d-kv-cache's pkg/kvevents/pool.go and
pkg/kvcache/kvblock/token_processor.go), not from LatentGate's C++ publisher, so
that it can judge that publisher. Debian's python3 only: zmq, msgpack, cbor2 and
the standard library.

What is here:
  - decoding of one message `[topic, seq (8 bytes BE), msgpack payload]` and a
    strict validator of vLLM's payload layout, array events (vLLM before #42892)
    and map events (after), with a check that python msgpack re-encodes the
    decoded batch to the very bytes received (float64 ts, shortest ints, str
    and bin types): what msgspec writes;
  - `contract_problems`: what LatentGate promises beyond vLLM's layout (exactly
    8 BlockStored fields, block size 64, token_ids of every block, media);
  - llm-d's request keys: FNV-64a over canonical CBOR [parent, tokens, extra];
  - `Index`: llm-d's in-memory index (engine key -> request key per pod, request
    key -> {(pod, medium)}), fed by events only, with its rules: a BlockStored
    whose parent engine key is unknown is dropped, BlockRemoved drops (pod,
    medium), AllBlocksCleared drops the pod; longest consecutive prefix per pod;
  - `Subscriber`: one SUB per pod (topic filter "kv@"), sequence tracking per
    pod (contiguous; a lower seq is a restart; a jump is a gap), optional
    catch-up through the replay socket; `replay()`: the replay client;
  - a CLI: `serve` (plain-HTTP POST /score for a routing benchmark), `watch`
    (decoded events as JSON lines) and `replay`.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cbor2
import msgpack
import zmq

BLOCK_SIZE = 64
END_SEQ = b"\xff" * 8
U64 = (1 << 64) - 1
FNV64_OFFSET = 14695981039346656037
FNV64_PRIME = 1099511628211

# vLLM's event structs, fields in declaration order (= array positions after the
# tag), and how many of them have no default (always present).
STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                 "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")
STORED_REQUIRED = 7
REMOVED_FIELDS = ("block_hashes", "medium", "group_idx")
REMOVED_REQUIRED = 2
CLEARED_FIELDS = ()
EVENT_FIELDS = {
    "BlockStored": (STORED_FIELDS, STORED_REQUIRED),
    "BlockRemoved": (REMOVED_FIELDS, REMOVED_REQUIRED),
    "AllBlocksCleared": (CLEARED_FIELDS, 0),
}
LATENTGATE_MEDIA = ("GPU", "CPU", "DISK")


class FormatError(ValueError):
    """A message that does not follow vLLM's wire format."""


class Event:
    """One decoded event. `fields` holds every field of its type (defaults filled in)."""

    __slots__ = ("type", "fields", "encoding", "length")

    def __init__(self, type_, fields, encoding, length):
        self.type = type_
        self.fields = fields
        self.encoding = encoding  # "array" or "map"
        self.length = length      # array elements or map keys, the tag included

    def __getattr__(self, name):
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self):
        return "Event(%s, %s, %s)" % (self.type, self.encoding, self.fields)


class Batch:
    __slots__ = ("ts", "events", "dp_rank", "length", "raw")

    def __init__(self, ts, events, dp_rank, length, raw):
        self.ts, self.events, self.dp_rank, self.length, self.raw = ts, events, dp_rank, length, raw


class Message:
    __slots__ = ("topic", "seq", "payload", "batch")

    def __init__(self, topic, seq, payload, batch):
        self.topic, self.seq, self.payload, self.batch = topic, seq, payload, batch


# ---------------------------------------------------------------------------
# Decoding and vLLM's layout

def _is_int(v):
    return type(v) is int  # bool is not an int here


def _check_hash(v, what):
    if _is_int(v):
        if not 0 <= v <= U64:
            raise FormatError("%s %d is not an unsigned 64-bit integer" % (what, v))
    elif type(v) is not bytes:
        raise FormatError("%s is %s, not an int or bytes (ExternalBlockHash)" % (what, type(v).__name__))


def _check_field(type_, name, v, n_hashes):
    """vLLM's declared type of one field."""
    if name == "block_hashes":
        if type(v) is not list:
            raise FormatError("%s.block_hashes is not an array" % type_)
        for h in v:
            _check_hash(h, "%s block hash" % type_)
    elif name == "parent_block_hash":
        if v is not None:
            _check_hash(v, "parent_block_hash")
    elif name == "token_ids":
        if type(v) is not list or not all(_is_int(t) and 0 <= t <= 0xFFFFFFFF for t in v):
            raise FormatError("token_ids is not an array of unsigned 32-bit ints")
    elif name == "block_size":
        if not _is_int(v) or v <= 0:
            raise FormatError("block_size %r is not a positive int" % (v,))
    elif name in ("lora_id", "group_idx", "kv_cache_spec_sliding_window"):
        if v is not None and not _is_int(v):
            raise FormatError("%s %r is not an int or nil" % (name, v))
    elif name in ("medium", "lora_name", "kv_cache_spec_kind"):
        if v is not None and type(v) is not str:
            raise FormatError("%s %r is not a str or nil" % (name, v))
    elif name == "extra_keys":
        if v is not None:
            if type(v) is not list or not all(e is None or type(e) is list for e in v):
                raise FormatError("extra_keys is not an array of arrays or nils")
            if len(v) != n_hashes:
                raise FormatError("extra_keys has %d entries for %d blocks" % (len(v), n_hashes))


def parse_event(raw, encoding=None):
    """One event in vLLM's array or map form; `encoding` ("array", "map") demands one."""
    if type(raw) is list:
        enc = "array"
        if not raw or type(raw[0]) is not str:
            raise FormatError("array event without a str tag: %r" % (raw[:1],))
        type_ = raw[0]
        if type_ not in EVENT_FIELDS:
            raise FormatError("unknown event tag %r" % type_)
        names, required = EVENT_FIELDS[type_]
        values = raw[1:]
        if not required <= len(values) <= len(names):
            raise FormatError("%s array has %d elements; vLLM's has %d to %d"
                              % (type_, len(raw), required + 1, len(names) + 1))
        # msgspec's omit_defaults drops trailing defaulted fields of array-like
        # structs: a present optional tail must end in a non-default value.
        if len(values) > required and values[-1] is None:
            raise FormatError("%s array ends in a defaulted (nil) optional field at position %d"
                              % (type_, len(values)))
        fields = dict(zip(names, values))
    elif type(raw) is dict:
        enc = "map"
        keys = list(raw.keys())
        if not keys or keys[0] != "type":
            raise FormatError("map event whose first key is not \"type\": %r" % keys[:1])
        type_ = raw["type"]
        if type(type_) is not str or type_ not in EVENT_FIELDS:
            raise FormatError("unknown map event type %r" % (type_,))
        names, required = EVENT_FIELDS[type_]
        rest = keys[1:]
        unknown = [k for k in rest if k not in names]
        if unknown:
            raise FormatError("%s map has unknown keys %r" % (type_, unknown))
        missing = [k for k in names[:required] if k not in raw]
        if missing:
            raise FormatError("%s map lacks required keys %r" % (type_, missing))
        order = [names.index(k) for k in rest]
        if order != sorted(order):
            raise FormatError("%s map keys %r are not in vLLM's declaration order" % (type_, rest))
        for k in rest:
            if names.index(k) >= required and raw[k] is None:
                raise FormatError("%s map carries defaulted field %r (omit_defaults drops it)" % (type_, k))
        fields = {k: raw[k] for k in rest}
    else:
        raise FormatError("event is a %s, neither an array nor a map" % type(raw).__name__)
    if encoding is not None and enc != encoding:
        raise FormatError("%s event in %s form, expected %s" % (type_, enc, encoding))
    n_hashes = len(fields.get("block_hashes") or [])
    for name, v in fields.items():
        _check_field(type_, name, v, n_hashes)
    for name in names:
        fields.setdefault(name, None)
    length = len(raw)
    return Event(type_, fields, enc, length)


def unpack(payload):
    try:
        return msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=True)
    except Exception as e:  # ExtraData, UnicodeDecodeError, ValueError, ...
        raise FormatError("payload is not one msgpack object: %s" % e) from e


def pack(obj):
    """What msgspec writes for these Python values: float64, shortest ints, str/bin types."""
    return msgpack.packb(obj, use_bin_type=True, use_single_float=False)


def parse_batch(obj, encoding=None, raw=None):
    """vLLM's EventBatch: [ts: float64, events, data_parallel_rank] (an array in every release)."""
    if type(obj) is not list:
        raise FormatError("batch is a %s, not an array" % type(obj).__name__)
    if len(obj) not in (2, 3):
        raise FormatError("batch array has %d elements, vLLM's has 2 or 3" % len(obj))
    ts = obj[0]
    if type(ts) is not float:
        raise FormatError("batch ts is %s, not a float" % type(ts).__name__)
    if type(obj[1]) is not list:
        raise FormatError("batch events is not an array")
    dp = obj[2] if len(obj) == 3 else None
    if len(obj) == 3 and not (_is_int(dp) and dp >= 0):
        raise FormatError("data_parallel_rank %r is not a non-negative int (a nil one is omitted)" % (dp,))
    events = [parse_event(e, encoding) for e in obj[1]]
    return Batch(ts, events, dp, len(obj), raw if raw is not None else obj)


def decode_payload(payload, encoding=None, reencode=True):
    """A payload's batch, validated; with `reencode`, python msgpack must write the same bytes."""
    obj = unpack(payload)
    batch = parse_batch(obj, encoding)
    if reencode:
        again = pack(obj)
        if again != payload:
            i = next((k for k in range(min(len(again), len(payload))) if again[k] != payload[k]),
                     min(len(again), len(payload)))
            raise FormatError("re-encoding differs from the received %d bytes at byte %d: got %s, re-encoded %s"
                              % (len(payload), i, payload[i:i + 9].hex(), again[i:i + 9].hex()))
    return batch


def decode_frames(frames, encoding=None, reencode=True):
    """One PUB message: [topic, seq 8 bytes big-endian, payload]."""
    if len(frames) != 3:
        raise FormatError("message has %d frames, not 3" % len(frames))
    topic, seq, payload = (bytes(f) for f in frames)
    if len(seq) != 8:
        raise FormatError("sequence frame has %d bytes, not 8" % len(seq))
    return Message(topic, int.from_bytes(seq, "big"), payload, decode_payload(payload, encoding, reencode))


def parse_topic(topic):
    """llm-d's parseTopic: "kv@<pod-id>@<model>" -> (pod_id, model), or None."""
    t = topic.decode("utf-8", "replace") if isinstance(topic, bytes) else topic
    parts = t.split("@")
    if len(parts) < 3 or parts[0] != "kv":
        return None
    return parts[1], "@".join(parts[2:])


def contract_problems(msg, encoding="array", block_size=BLOCK_SIZE, media=LATENTGATE_MEDIA):
    """What LatentGate's publisher promises beyond vLLM's layout; a list of problems (empty: none)."""
    out = []
    b = msg.batch
    if b.length != 3 or b.dp_rank != 0:
        out.append("seq %d: batch should be [ts, events, 0], has %d elements, rank %r" % (msg.seq, b.length, b.dp_rank))
    if not b.events:
        out.append("seq %d: empty batch" % msg.seq)
    for i, e in enumerate(b.events):
        where = "seq %d event %d (%s)" % (msg.seq, i, e.type)
        if e.encoding != encoding:
            out.append("%s: %s form, expected %s" % (where, e.encoding, encoding))
        expect_len = {"BlockStored": 8, "BlockRemoved": 3, "AllBlocksCleared": 1}[e.type]
        if e.length != expect_len:
            out.append("%s: %d %s, expected exactly %d" % (where, e.length,
                                                           "elements" if e.encoding == "array" else "keys", expect_len))
        if e.type == "AllBlocksCleared":
            continue
        hashes = e.block_hashes
        if not hashes:
            out.append("%s: no block hashes" % where)
        if not all(_is_int(h) for h in hashes):
            out.append("%s: block hashes are not all ints" % where)
        if len(set(hashes)) != len(hashes):
            out.append("%s: duplicate block hashes in one event" % where)
        if e.medium not in media:
            out.append("%s: medium %r not one of %r" % (where, e.medium, media))
        if e.type == "BlockStored":
            if e.block_size != block_size:
                out.append("%s: block_size %r, expected %d" % (where, e.block_size, block_size))
            if len(e.token_ids) != block_size * len(hashes):
                out.append("%s: %d token_ids for %d blocks of %d" % (where, len(e.token_ids), len(hashes), block_size))
            if e.lora_id is not None or e.lora_name is not None:
                out.append("%s: lora_id/lora_name set (%r, %r)" % (where, e.lora_id, e.lora_name))
            if e.parent_block_hash is not None and not _is_int(e.parent_block_hash):
                out.append("%s: parent is not an int or nil" % where)
            if e.parent_block_hash is not None and e.parent_block_hash in hashes:
                out.append("%s: parent is one of the event's own blocks" % where)
    if b.events and msg.seq == 0 and [e.type for e in b.events] != ["AllBlocksCleared"]:
        out.append("seq 0 is %r, expected [AllBlocksCleared]" % [e.type for e in b.events])
    return out


# ---------------------------------------------------------------------------
# llm-d's request keys (pkg/kvcache/kvblock/token_processor.go)

def fnv1a64(data):
    h = FNV64_OFFSET
    for c in data:
        h = ((h ^ c) * FNV64_PRIME) & U64
    return h


def llmd_hash(parent, tokens, extra=None):
    """FNV-64a(canonical CBOR [parent: uint64, tokens: [uint32] or nil, extra])."""
    return fnv1a64(cbor2.dumps([parent, tokens, extra], canonical=True))


def init_hash(seed=""):
    return fnv1a64(seed.encode("utf-8") if isinstance(seed, str) else seed)


def root_key(model, seed=""):
    """getInitHash: hash(FNV-64a(hashSeed), nil tokens, model name)."""
    return llmd_hash(init_hash(seed), None, model)


def request_keys(tokens, model, parent_key=None, block_size=BLOCK_SIZE, extras=None, seed=""):
    """TokensToKVBlockKeys: one key per full block (a partial tail is dropped), chained from
    `parent_key` (None or 0, llm-d's EmptyBlockHash: the model's root)."""
    p = parent_key if parent_key else root_key(model, seed)
    n = len(tokens) // block_size
    if extras is not None and len(extras) != n:
        raise ValueError("extras has %d entries for %d blocks" % (len(extras), n))
    out = []
    for i in range(n):
        p = llmd_hash(p, [int(t) for t in tokens[i * block_size:(i + 1) * block_size]],
                      None if extras is None else extras[i])
        out.append(p)
    return out


# ---------------------------------------------------------------------------
# llm-d's index (pkg/kvevents/pool.go processEventBatch, kvblock in-memory index)

class Index:
    """Engine keys are opaque per pod; request keys are recomputed from token_ids."""

    def __init__(self, block_size=BLOCK_SIZE, seed=""):
        self.block_size = block_size
        self.seed = seed
        self.lock = threading.RLock()
        self.engine = {}     # pod -> {engine hash: [request keys]}
        self.where = {}      # request key -> {(pod, medium)}
        self.speculative = {}  # request key -> {pod: time.monotonic() until which it counts}
        self.counts = {"stored": 0, "stored_blocks": 0, "dropped_unknown_parent": 0, "removed": 0,
                       "removed_unknown": 0, "cleared": 0, "tier_updates": 0}
        self.dropped = []    # (pod, event) of the BlockStored dropped for an unknown parent

    def clear_pod(self, pod):
        with self.lock:
            self.engine.pop(pod, None)
            for rk in list(self.where):
                s = self.where[rk]
                for entry in [x for x in s if x[0] == pod]:
                    s.discard(entry)
                if not s:
                    del self.where[rk]

    def request_key_of(self, pod, engine_hash):
        rks = self.engine.get(pod, {}).get(engine_hash)
        return rks[-1] if rks else None

    def apply(self, pod, event, model):
        """One event of `pod` (model: the topic's, or lora_name when set). False when dropped."""
        with self.lock:
            if event.type == "AllBlocksCleared":
                self.counts["cleared"] += 1
                self.clear_pod(pod)
                return True
            tier = (event.medium or "GPU").lower()
            if event.type == "BlockRemoved":
                emap = self.engine.get(pod, {})
                for h in event.block_hashes:
                    rks = emap.get(h)
                    if not rks:
                        self.counts["removed_unknown"] += 1
                        continue
                    self.counts["removed"] += 1
                    for rk in rks:
                        s = self.where.get(rk)
                        if s is not None:
                            s.discard((pod, tier))
                            if not s:
                                del self.where[rk]
                    if not any(self._tiers(pod, rk) for rk in rks):
                        del emap[h]  # the pod holds none of them on any tier now
                return True
            # BlockStored
            model = event.lora_name or model
            emap = self.engine.setdefault(pod, {})
            if not event.token_ids:  # a tier update: the blocks are known by their engine keys
                self.counts["tier_updates"] += 1
                for h in event.block_hashes:
                    for rk in emap.get(h, ()):
                        self.where.setdefault(rk, set()).add((pod, tier))
                return True
            parent_rk = None
            if event.parent_block_hash:
                parent_rk = self.request_key_of(pod, event.parent_block_hash)
                if parent_rk is None:
                    self.counts["dropped_unknown_parent"] += 1
                    self.dropped.append((pod, event))
                    return False
            rks = request_keys(event.token_ids, model, parent_rk, self.block_size, seed=self.seed)
            if not rks:
                return True
            eks = event.block_hashes
            n = max(len(eks), len(rks))
            fresh = {}
            for i in range(n):  # llm-d's ratio mapping (1:1 when the block sizes agree)
                fresh.setdefault(eks[i * len(eks) // n], []).append(rks[i * len(rks) // n])
            emap.update(fresh)
            for rk in rks:
                self.where.setdefault(rk, set()).add((pod, tier))
            self.counts["stored"] += 1
            self.counts["stored_blocks"] += len(rks)
            return True

    def _tiers(self, pod, rk):
        return [m for (p, m) in self.where.get(rk, ()) if p == pod]

    def pods_of(self, rk):
        with self.lock:
            return {p for (p, _) in self.where.get(rk, ())}

    def speculate(self, tokens, model, pod, ttl):
        """llm-d's speculative indexing (the precise scorer's speculativeIndexing,
        speculativeTTL): the router takes the blocks of a request it just sent to
        `pod` as held there for `ttl` seconds, before the pod's events say so, so
        that requests with the same prefix that arrive meanwhile follow it."""
        keys = request_keys(tokens, model, None, self.block_size, seed=self.seed)
        now = time.monotonic()
        until = now + ttl
        with self.lock:
            for rk in list(self.speculative):  # what expired goes: the map stays bounded by the TTL
                self._speculative_pods(rk, now)
            for rk in keys:
                self.speculative.setdefault(rk, {})[pod] = until
            self.counts["speculated_blocks"] = self.counts.get("speculated_blocks", 0) + len(keys)

    def _speculative_pods(self, rk, now):
        held = self.speculative.get(rk)
        if not held:
            return set()
        live = {p for p, until in held.items() if until > now}
        if len(live) != len(held):
            for p in [p for p, until in held.items() if until <= now]:
                del held[p]
            if not held:
                del self.speculative[rk]
        return live

    def longest_prefix(self, tokens, model, pods=()):
        """Per pod, how many leading blocks of `tokens` it holds (any tier, or
        speculatively), consecutively."""
        keys = request_keys(tokens, model, None, self.block_size, seed=self.seed)
        now = time.monotonic()
        with self.lock:
            out = {p: 0 for p in pods}
            active = None
            for i, rk in enumerate(keys):
                here = {p for (p, _) in self.where.get(rk, ())} | self._speculative_pods(rk, now)
                active = here if active is None else (active & here)
                if not active:
                    break
                for p in active:
                    out[p] = i + 1
            return out

    def best(self, tokens, model, pods=()):
        """(pod, blocks) of the longest prefix; pod None when nobody holds block 0."""
        scores = self.longest_prefix(tokens, model, pods)
        if not scores or max(scores.values()) == 0:
            return None, 0
        top = max(scores.values())
        winners = sorted(p for p, v in scores.items() if v == top)
        return winners[0], top


# ---------------------------------------------------------------------------
# Replay client

def replay(endpoint, start_seq=0, timeout=5.0, ctx=None):
    """Every buffered [seq, payload] with seq >= start_seq, through a DEALER (the empty
    delimiter frame first, as a REQ would send it). Returns (messages, ended): ended is
    True once the end marker [ffffffffffffffff, b""] came."""
    ctx = ctx or zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(endpoint)
        s.send_multipart([b"", int(start_seq).to_bytes(8, "big")])
        out = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not s.poll(int(left * 1000)):
                return out, False
            frames = s.recv_multipart()
            if len(frames) != 3 or frames[0] != b"":
                raise FormatError("replay reply has frames %r, expected [b'', seq, payload]"
                                  % [f[:16] for f in frames])
            _, seq, payload = frames
            if len(seq) != 8:
                raise FormatError("replay sequence frame has %d bytes" % len(seq))
            if seq == END_SEQ:
                if payload != b"":
                    raise FormatError("end marker with a %d-byte payload" % len(payload))
                return out, True
            out.append((int.from_bytes(seq, "big"), payload))
    finally:
        s.close(0)


def replay_first_with_req(endpoint, start_seq=0, timeout=5.0, ctx=None):
    """What a strict REQ client reads: only the first reply (vLLM's ROUTER answers one
    request with many messages; libzmq's REQ takes one). (seq, payload) or None."""
    ctx = ctx or zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(endpoint)
        s.send(int(start_seq).to_bytes(8, "big"))
        if not s.poll(int(timeout * 1000)):
            return None
        frames = s.recv_multipart()
        if len(frames) != 2:
            raise FormatError("REQ reply has %d frames" % len(frames))
        return int.from_bytes(frames[0], "big"), frames[1]
    finally:
        s.close(0)


# ---------------------------------------------------------------------------
# Subscriber

class Feed:
    """One pod's stream as a subscriber saw it."""

    def __init__(self, name, endpoint, replay_endpoint=None, encoding=None, bind=False):
        self.name = name
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.encoding = encoding    # demanded event form, or None for either
        self.bind = bind            # central mode: the subscriber binds, publishers connect
        self.last_seq = None
        self.first_seq = None
        self.topic = None
        self.pod_id = None
        self.model = None
        self.restarts = []          # (last seq before, first seq after)
        self.gaps = []              # (expected, got)
        self.errors = []            # (seq or None, text)
        self.log = []               # (seq, Message, source) in the order applied; source "live" or "replay"
        self.received = 0


class Subscriber:
    """One SUB per pod; messages are validated and applied to `index` on one thread.

    catch_up: on a gap, a restart, or a join after seq 0, fetch the missing batches
    from the pod's replay socket (llm-d itself never does; the test's late subscriber
    must not, to prove re-announcement). keep_log: keep every message per pod."""

    def __init__(self, index, feeds, topic_filter=b"kv@", catch_up=False, reencode=True, keep_log=True,
                 contract=None, ctx=None):
        self.index = index
        self.feeds = {f.name: f for f in feeds}
        self.topic_filter = topic_filter
        self.catch_up = catch_up
        self.reencode = reencode
        self.keep_log = keep_log
        self.contract = contract    # None, or kwargs of contract_problems (block_size, media)
        self.ctx = ctx or zmq.Context.instance()
        self.cond = threading.Condition(index.lock)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = None
        self._socks = {}

    def start(self):
        self._thread = threading.Thread(target=self._run, name="kv-subscriber", daemon=True)
        self._thread.start()
        self._ready.wait(5)
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def wait_for(self, predicate, timeout):
        """Waits until predicate() (called under the index lock) holds; its value."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = predicate()
                left = deadline - time.monotonic()
                if v or left <= 0:
                    return v
                self.cond.wait(min(left, 0.2))

    def _run(self):
        poller = zmq.Poller()
        for f in self.feeds.values():
            s = self.ctx.socket(zmq.SUB)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SUBSCRIBE, self.topic_filter)
            if f.bind:
                s.bind(f.endpoint)
            else:
                s.connect(f.endpoint)
            self._socks[s] = f
            poller.register(s, zmq.POLLIN)
        self._ready.set()
        try:
            while not self._stop.is_set():
                for s, _ in poller.poll(100):
                    while True:
                        try:
                            frames = s.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._on_frames(self._socks[s], frames, "live")
        finally:
            for s in self._socks:
                s.close(0)

    def _decode(self, f, frames, source):
        try:
            msg = decode_frames(frames, f.encoding, self.reencode)
        except FormatError as e:
            seq = int.from_bytes(frames[1], "big") if len(frames) == 3 and len(frames[1]) == 8 else None
            with self.cond:
                f.errors.append((seq, "%s: %s" % (source, e)))
                self.cond.notify_all()
            return None
        if self.contract is not None:
            problems = contract_problems(msg, f.encoding or "array", **self.contract)
            if problems:
                with self.cond:
                    f.errors.extend((msg.seq, "%s: %s" % (source, p)) for p in problems)
        return msg

    def _on_frames(self, f, frames, source):
        msg = self._decode(f, frames, source)
        if msg is None:
            return
        with self.cond:
            f.received += 1
            if f.topic is None or msg.topic != f.topic:
                parsed = parse_topic(msg.topic)
                if parsed is None:
                    f.errors.append((msg.seq, "topic %r is not kv@<pod>@<model>" % msg.topic))
                    return
                f.topic = msg.topic
                f.pod_id, f.model = parsed
            missing = None
            if f.last_seq is None:
                f.first_seq = msg.seq
                if msg.seq != 0 and self.catch_up:
                    missing = (0, msg.seq)
            elif msg.seq == f.last_seq + 1:
                pass
            elif msg.seq <= f.last_seq:
                f.restarts.append((f.last_seq, msg.seq))
                self.index.clear_pod(f.name)  # the pod's engine restarted: its blocks are gone
                if msg.seq != 0 and self.catch_up:
                    missing = (0, msg.seq)
            else:
                f.gaps.append((f.last_seq + 1, msg.seq))
                if self.catch_up:
                    missing = (f.last_seq + 1, msg.seq)
        if missing is not None and f.replay_endpoint:
            self._catch_up(f, *missing)
        with self.cond:
            self._apply(f, msg, source)
            self.cond.notify_all()

    def _catch_up(self, f, start, stop):
        try:
            got, ended = replay(f.replay_endpoint, start, ctx=self.ctx)
        except (FormatError, zmq.ZMQError) as e:
            with self.cond:
                f.errors.append((None, "replay: %s" % e))
            return
        if not ended:
            with self.cond:
                f.errors.append((None, "replay from %d: no end marker" % start))
        for seq, payload in got:
            if seq >= stop:
                break
            msg = self._decode(f, [f.topic or b"", seq.to_bytes(8, "big"), payload], "replay")
            if msg is not None:
                with self.cond:
                    self._apply(f, msg, "replay")

    def _apply(self, f, msg, source):
        f.last_seq = msg.seq
        if self.keep_log:
            f.log.append((msg.seq, msg, source))
        for e in msg.batch.events:
            self.index.apply(f.name, e, f.model or "")


# ---------------------------------------------------------------------------
# CLI

def _pairs(values, what):
    out = {}
    for v in values or ():
        name, sep, endpoint = v.partition("=")
        if not sep or not name or not endpoint:
            raise SystemExit("%s %r: expected NAME=ENDPOINT" % (what, v))
        out[name] = endpoint
    return out


def _feeds(args):
    pods = _pairs(args.pod, "--pod")
    replays = _pairs(getattr(args, "replay", None), "--replay")
    if not pods:
        raise SystemExit("at least one --pod NAME=ENDPOINT")
    return [Feed(n, e, replays.get(n), getattr(args, "encoding", None)) for n, e in pods.items()]


def cmd_serve(args):
    index = Index(args.block_size, args.hash_seed)
    feeds = _feeds(args)
    sub = Subscriber(index, feeds, catch_up=args.catch_up, keep_log=False).start()
    names = [f.name for f in feeds]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path == "/healthz":
                return self._send(200, {"ok": True})
            if self.path == "/stats":
                with index.lock:
                    return self._send(200, {
                        "counts": index.counts, "request_keys": len(index.where),
                        "pods": {f.name: {"topic": (f.topic or b"").decode("utf-8", "replace"), "last_seq": f.last_seq,
                                          "received": f.received, "restarts": len(f.restarts), "gaps": len(f.gaps),
                                          "errors": [e[1] for e in f.errors[-5:]], "error_count": len(f.errors)}
                                 for f in feeds}})
            return self._send(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
            except ValueError:
                return self._send(400, {"error": "body is not JSON"})
            if self.path not in ("/score", "/speculate"):
                return self._send(404, {"error": "not found"})
            ids = body.get("token_ids")
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                return self._send(400, {"error": "token_ids must be an array of ints"})
            model = body.get("model") or args.model
            if self.path == "/speculate":
                if args.speculative_ttl <= 0:
                    return self._send(404, {"error": "speculative indexing is off (--speculative-ttl)"})
                if body.get("pod") not in names:
                    return self._send(400, {"error": "pod must be one of %s" % names})
                index.speculate(ids, model, body["pod"], args.speculative_ttl)
                return self._send(200, {"ok": True})
            return self._send(200, {"scores": index.longest_prefix(ids, model, names),
                                    "blocks": len(ids) // args.block_size})

    host, _, port = args.listen.rpartition(":")
    httpd = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    print("llmd_index serving on http://%s:%d" % httpd.server_address[:2], flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        sub.stop()


def _event_json(e):
    return dict(type=e.type, encoding=e.encoding, **{k: v for k, v in e.fields.items() if v is not None})


def cmd_watch(args):
    feeds = _feeds(args)
    index = Index(args.block_size)
    printed = {f.name: 0 for f in feeds}
    sub = Subscriber(index, feeds, catch_up=args.catch_up).start()
    end = time.monotonic() + args.seconds if args.seconds else None
    try:
        while end is None or time.monotonic() < end:
            time.sleep(0.1)
            with index.lock:
                for f in feeds:
                    for seq, msg, source in f.log[printed[f.name]:]:
                        print(json.dumps({"pod": f.name, "seq": seq, "source": source, "ts": msg.batch.ts,
                                          "events": [_event_json(e) for e in msg.batch.events]}), flush=True)
                    printed[f.name] = len(f.log)
                    for seq, err in f.errors:
                        print(json.dumps({"pod": f.name, "seq": seq, "error": err}), flush=True)
                    f.errors.clear()
    except KeyboardInterrupt:
        pass
    finally:
        sub.stop()


def cmd_replay(args):
    got, ended = replay(args.endpoint, args.start, args.timeout)
    bad = 0
    for seq, payload in got:
        try:
            b = decode_payload(payload, args.encoding)
            print(json.dumps({"seq": seq, "ts": b.ts, "events": [_event_json(e) for e in b.events]}))
        except FormatError as e:
            bad += 1
            print(json.dumps({"seq": seq, "error": str(e)}))
    print(json.dumps({"messages": len(got), "ended": ended, "invalid": bad}))
    return 0 if ended and not bad else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="an llm-d-like index answering POST /score over plain HTTP")
    s.add_argument("--listen", required=True, help="HOST:PORT")
    s.add_argument("--pod", action="append", help="NAME=ENDPOINT of a pod's PUB socket (repeatable)")
    s.add_argument("--replay", action="append", help="NAME=ENDPOINT of a pod's replay socket (with --catch-up)")
    s.add_argument("--catch-up", action="store_true", help="fill gaps and restarts through the replay sockets")
    s.add_argument("--model", default="demo")
    s.add_argument("--block-size", type=int, default=BLOCK_SIZE)
    s.add_argument("--hash-seed", default="")
    s.add_argument("--speculative-ttl", type=float, default=0.0,
                   help="seconds a POST /speculate {token_ids, pod} counts the request's blocks as held by the pod "
                        "(llm-d's speculativeIndexing / speculativeTTL); 0: off")
    s.set_defaults(fn=cmd_serve)
    w = sub.add_parser("watch", help="print each pod's decoded events as JSON lines")
    w.add_argument("--pod", action="append")
    w.add_argument("--replay", action="append")
    w.add_argument("--catch-up", action="store_true")
    w.add_argument("--encoding", choices=("array", "map"))
    w.add_argument("--block-size", type=int, default=BLOCK_SIZE)
    w.add_argument("--seconds", type=float, default=0)
    w.set_defaults(fn=cmd_watch)
    r = sub.add_parser("replay", help="fetch and print a replay socket's buffer")
    r.add_argument("endpoint")
    r.add_argument("--start", type=int, default=0)
    r.add_argument("--timeout", type=float, default=5.0)
    r.add_argument("--encoding", choices=("array", "map"))
    r.set_defaults(fn=cmd_replay)
    args = ap.parse_args(argv)
    return args.fn(args) or 0


if __name__ == "__main__":
    sys.exit(main())
