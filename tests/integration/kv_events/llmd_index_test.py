#!/usr/bin/python3
"""Unit tests of llmd_index.py, without a LatentGate server.

The decoder against the golden bytes of vLLM's format (/work/shared/design/kv-events.md
section 1.2, encoded with Debian's python3-msgpack following vLLM's msgspec layout),
the strict validator on malformed batches, llm-d's request keys against llm-d's own
golden keys, the index's rules, and the subscriber and replay client against a small
publisher written here from vLLM's ZmqEventPublisher protocol.
"""

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llmd_index as L  # noqa: E402

# kv-events.md 1.2: block_size 4, two blocks, h = low64(sha256(b"k1"/b"k2")), ts 2026-01-01.
GOLDEN_STORED = bytes.fromhex(
    "93cb41da556e400000009198ab426c6f636b53746f72656492cf8668b09c08a16dd0cf2765cff4d780306ec0"
    "98010203040506070804c0a3475055c000")
GOLDEN_REMOVED = bytes.fromhex("93cb41da556e400000009193ac426c6f636b52656d6f76656491cf2765cff4d780306ea347505500")
GOLDEN_CLEARED = bytes.fromhex("93cb41da556e400000009191b0416c6c426c6f636b73436c656172656400")
TS = 1767225600.0


def low64(data):
    return int.from_bytes(hashlib.sha256(data).digest()[-8:], "big")


H1, H2 = low64(b"k1"), low64(b"k2")


def stored(hashes, parent, tokens, medium="CPU", block_size=64):
    return ["BlockStored", list(hashes), parent, list(tokens), block_size, None, medium, None]


def removed(hashes, medium="CPU"):
    return ["BlockRemoved", list(hashes), medium]


def cleared():
    return ["AllBlocksCleared"]


def as_map(ev):
    tag = ev[0]
    names = L.EVENT_FIELDS[tag][0]
    m = {"type": tag}
    m.update(zip(names, ev[1:]))
    return m


def batch(events, ts=TS):
    return L.pack([ts, events, 0])


class GoldenBytes(unittest.TestCase):
    def test_block_stored(self):
        self.assertEqual(len(GOLDEN_STORED), 61)
        b = L.decode_payload(GOLDEN_STORED, "array")
        self.assertEqual((b.ts, b.dp_rank, b.length), (TS, 0, 3))
        (e,) = b.events
        self.assertEqual((e.type, e.encoding, e.length), ("BlockStored", "array", 8))
        self.assertEqual(e.block_hashes, [H1, H2])
        self.assertEqual(e.block_hashes, [9685185182866435536, 2838903790621438062])
        self.assertIsNone(e.parent_block_hash)
        self.assertEqual(e.token_ids, list(range(1, 9)))
        self.assertEqual((e.block_size, e.lora_id, e.medium, e.lora_name, e.extra_keys), (4, None, "GPU", None, None))
        self.assertEqual(L.pack(L.unpack(GOLDEN_STORED)), GOLDEN_STORED)
        # The same batch built from Python values encodes to the golden bytes.
        self.assertEqual(batch([stored([H1, H2], None, range(1, 9), "GPU", 4)]), GOLDEN_STORED)

    def test_block_removed_and_cleared(self):
        (e,) = L.decode_payload(GOLDEN_REMOVED, "array").events
        self.assertEqual((e.type, e.block_hashes, e.medium, e.group_idx), ("BlockRemoved", [H2], "GPU", None))
        (c,) = L.decode_payload(GOLDEN_CLEARED, "array").events
        self.assertEqual((c.type, c.length), ("AllBlocksCleared", 1))
        self.assertEqual(batch([removed([H2], "GPU")]), GOLDEN_REMOVED)
        self.assertEqual(batch([cleared()]), GOLDEN_CLEARED)

    def test_frames_and_markers(self):
        m = L.decode_frames([b"kv@127.0.0.1:8443@demo", bytes(8), GOLDEN_CLEARED])
        self.assertEqual((m.seq, m.topic), (0, b"kv@127.0.0.1:8443@demo"))
        self.assertEqual(L.parse_topic(m.topic), ("127.0.0.1:8443", "demo"))
        self.assertEqual(L.END_SEQ, (-1).to_bytes(8, "big", signed=True))
        self.assertEqual(L.decode_frames([b"", (5).to_bytes(8, "big"), GOLDEN_STORED]).seq, 5)
        with self.assertRaises(L.FormatError):
            L.decode_frames([bytes(8), GOLDEN_CLEARED])
        with self.assertRaises(L.FormatError):
            L.decode_frames([b"t", bytes(7), GOLDEN_CLEARED])

    def test_contract_of_golden(self):
        m = L.decode_frames([b"kv@x@demo", bytes(8), GOLDEN_STORED])
        problems = L.contract_problems(m)
        self.assertTrue(any("block_size 4" in p for p in problems), problems)
        self.assertTrue(any("seq 0" in p for p in problems), problems)
        ok = L.decode_frames([b"kv@x@demo", (1).to_bytes(8, "big"),
                              batch([stored([1, 2], 7, range(128)), removed([1], "DISK")])])
        self.assertEqual(L.contract_problems(ok), [])


class MapForm(unittest.TestCase):
    def test_map_events_validate(self):
        events = [as_map(stored([H1, H2], None, range(1, 9), "GPU", 4)), as_map(removed([H2], "GPU")),
                  as_map(cleared())]
        raw = batch(events)
        b = L.decode_payload(raw, "map")
        self.assertEqual([e.type for e in b.events], ["BlockStored", "BlockRemoved", "AllBlocksCleared"])
        self.assertEqual([e.length for e in b.events], [8, 3, 1])
        self.assertEqual(b.events[0].token_ids, list(range(1, 9)))
        self.assertEqual(L.pack(L.unpack(raw)), raw)
        with self.assertRaisesRegex(L.FormatError, "expected array"):
            L.decode_payload(raw, "array")
        with self.assertRaisesRegex(L.FormatError, "expected map"):
            L.decode_payload(GOLDEN_STORED, "map")
        m = L.decode_frames([b"kv@p@demo", (3).to_bytes(8, "big"),
                             batch([as_map(stored([5], None, range(64)))])])
        self.assertEqual(L.contract_problems(m, encoding="map"), [])

    def test_map_optional_fields(self):
        ev = as_map(stored([H1], None, range(4), "GPU", 4))
        ev["extra_keys"] = [None]
        ev["group_idx"] = 0
        ev["kv_cache_spec_kind"] = "full_attention"
        (e,) = L.decode_payload(batch([ev]), "map").events
        self.assertEqual((e.group_idx, e.kv_cache_spec_kind, e.length), (0, "full_attention", 11))

    def test_map_violations(self):
        def bad(mutate, pattern):
            ev = as_map(stored([H1], None, range(4), "GPU", 4))
            ev = mutate(ev) or ev
            with self.assertRaisesRegex(L.FormatError, pattern):
                L.decode_payload(batch([ev]), "map")
        bad(lambda e: e.pop("medium") and None, "lacks required")
        bad(lambda e: e.update(team="a"), "unknown keys")
        bad(lambda e: e.update(group_idx=None), "defaulted field")
        bad(lambda e: {k: e[k] for k in ["type", "parent_block_hash", "block_hashes", "token_ids", "block_size",
                                         "lora_id", "medium", "lora_name"]}, "declaration order")
        bad(lambda e: {k: e[k] for k in ["block_hashes", "type", "parent_block_hash", "token_ids", "block_size",
                                         "lora_id", "medium", "lora_name"]}, "first key")
        bad(lambda e: e.update(type="BlockEvicted"), "unknown map event type")


class ArrayViolations(unittest.TestCase):
    def bad(self, raw, pattern, encoding="array"):
        with self.assertRaisesRegex(L.FormatError, pattern):
            L.decode_payload(raw, encoding)

    def test_shapes(self):
        self.bad(batch([stored([1], None, range(64))[:7]]), "7 elements")
        self.bad(batch([stored([1], None, range(64)) + [None]]), "defaulted")
        self.bad(batch([removed([1]) + [None]]), "defaulted")
        self.bad(batch([["AllBlocksCleared", None]]), "elements")
        self.bad(batch([["BlockEvicted", [1]]]), "unknown event tag")
        self.bad(L.pack({"ts": TS, "events": [], "data_parallel_rank": 0}), "not an array")
        self.bad(L.pack([TS, [], 0, 0]), "4 elements")
        self.bad(L.pack([TS, [], None]), "data_parallel_rank")
        self.bad(L.pack([1767225600, [], 0]), "not a float")
        self.bad(L.pack([TS, [], 0]) + b"\xc0", "one msgpack object")

    def test_valid_optional_tail(self):
        raw = batch([stored([1], None, range(64)) + [None, 0]])
        (e,) = L.decode_payload(raw, "array").events
        self.assertEqual((e.extra_keys, e.group_idx, e.length), (None, 0, 10))
        raw = batch([stored([1], None, range(64)) + [[None]]])
        self.assertEqual(L.decode_payload(raw).events[0].extra_keys, [None])
        self.bad(batch([stored([1, 2], None, range(64)) + [[None]]]), "extra_keys has 1 entries for 2")

    def test_types(self):
        self.bad(batch([stored([1], None, range(64), block_size=True)]), "block_size")
        self.bad(batch([stored([1], None, range(64), block_size=0)]), "block_size")
        self.bad(batch([stored(["x"], None, range(64))]), "not an int or bytes")
        self.bad(batch([stored([1], "p", range(64))]), "parent_block_hash")
        self.bad(batch([stored([1], None, [1, -2])]), "token_ids")
        self.bad(batch([stored([1], None, [1, 1 << 32])]), "token_ids")
        self.bad(batch([stored([1], None, range(64), medium=3)]), "medium")
        self.bad(L.pack([TS, [["BlockStored", [1], None, [], 64, "lora", "CPU", None]], 0]), "lora_id")
        # A raw 32-byte hash (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) is vLLM's layout, not LatentGate's contract.
        m = L.decode_frames([b"kv@p@m", (1).to_bytes(8, "big"), batch([stored([b"\x01" * 32], None, range(64))])])
        self.assertTrue(any("not all ints" in p for p in L.contract_problems(m)))

    def test_reencoding_catches_what_msgspec_never_writes(self):
        good = batch([stored([1], None, range(64))])
        # ts as float32 (0xca) instead of float64.
        f32 = b"\x93\xca" + struct.pack(">f", 1767225600.0) + good[10:]
        self.bad(f32, "re-encoding differs .* at byte 1")
        # block_size 64 as uint8 (cc 40) instead of a positive fixint (40).
        i = good.index(bytes([0x40, 0xc0, 0xa3]))
        self.bad(good[:i] + b"\xcc" + good[i:], "re-encoding differs")
        # "CPU" as str8 (d9 03) instead of fixstr (a3).
        j = good.index(b"\xa3CPU")
        self.bad(good[:j] + b"\xd9\x03CPU" + good[j + 4:], "re-encoding differs")
        # A map with keys re-ordered by a different encoder still re-encodes byte-exactly
        # (python keeps insertion order), so order is judged by the validator instead.
        self.assertEqual(L.decode_payload(good).events[0].token_ids, list(range(64)))
        # Without the check the float32 batch decodes.
        self.assertEqual(L.decode_payload(f32, reencode=False).ts, 1767225600.0)


class Keys(unittest.TestCase):
    def test_fnv1a64(self):
        self.assertEqual(L.fnv1a64(b""), 14695981039346656037)
        self.assertEqual(L.fnv1a64(b"a"), 0xaf63dc4c8601ec8c)
        self.assertEqual(L.fnv1a64(b"foobar"), 0x85944171f73967e8)
        self.assertEqual(L.init_hash(""), 14695981039346656037)

    def test_root_cbor(self):
        # [uint64 initHash, nil tokens (Go's nil []uint32), "demo"] in canonical CBOR.
        import cbor2
        enc = cbor2.dumps([L.init_hash(), None, "demo"], canonical=True)
        self.assertEqual(enc.hex(), "83" + "1bcbf29ce484222325" + "f6" + "6464656d6f")
        self.assertEqual(L.root_key("demo"), L.fnv1a64(enc))
        block = cbor2.dumps([1, [0, 23, 24, 255, 256, 65536], None], canonical=True)
        self.assertEqual(block.hex(), "83" + "01" + "86" + "00" + "17" + "1818" + "18ff" + "190100" + "1a00010000" + "f6")

    def test_llmd_golden_request_keys(self):
        # llm-d-kv-cache @7be76e1, tests/e2e/uds_tokenizer/uds_e2e_mm_test.go: Qwen2-VL's render of one image
        # and "What is in this image?" (15 tokens, 391 image placeholders, 12 tokens), blockSizeTokens 4, the
        # image's hash as extra ([{"Hash": ...}]) on each block that overlaps the placeholders, nil elsewhere.
        tokens = ([151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 151652]
                  + [151655] * 391 + [151653, 3838, 374, 304, 419, 2168, 30, 151645, 198, 151644, 77091, 198])
        self.assertEqual(len(tokens), 418)
        mm = "f9a38a66df90291515d7ea4de3175b262c1da7668ad1cc32e3dbb98be86388ac"
        extras = [[{"Hash": mm}] if (i * 4 < 15 + 391 and i * 4 + 4 > 15) else None for i in range(len(tokens) // 4)]
        keys = L.request_keys(tokens, "Qwen/Qwen2-VL-2B-Instruct", None, 4, extras)
        golden_head = [0xc3bf05790f422f47, 0xff0c0a9eb95b87cc, 0x99550d577537f9f3, 0x9aa30b0444712b0a,
                       0x27b9050856dde79d, 0x83e92a3d1e815a1b, 0x2bd1e5dcf67f7e44, 0x1d8735c56b5989fb]
        golden_tail = [0x09aed54744ad4513, 0x55edd881b3a17463, 0xb95b491efc26d447, 0x1b6a2db3cbc1bc17,
                       0xad81bd8f5ba4cac7, 0x3208cb3b4f2f9d3d, 0x6b72ebd4a0c5a575, 0xb34057dd9ecec7fd]
        self.assertEqual(len(keys), 104)
        self.assertEqual(keys[:8], golden_head)
        self.assertEqual(keys[-8:], golden_tail)
        # Continuing a chain from a parent key gives the same keys as hashing from the root.
        self.assertEqual(L.request_keys(tokens[16:], "Qwen/Qwen2-VL-2B-Instruct", keys[3], 4, extras[4:]), keys[4:])

    def test_text_keys(self):
        toks = list(range(1000, 1000 + 64 * 3 + 10))
        ks = L.request_keys(toks, "demo")
        self.assertEqual(len(ks), 3)  # the partial tail is dropped
        self.assertEqual(L.request_keys(toks[64:], "demo", ks[0]), ks[1:])
        self.assertNotEqual(L.request_keys(toks, "other")[0], ks[0])
        self.assertNotEqual(L.request_keys(toks, "demo", seed="42")[0], ks[0])
        self.assertEqual(L.request_keys(toks, "demo", 0), ks)  # 0 is llm-d's EmptyBlockHash: the root


class IndexRules(unittest.TestCase):
    def ev(self, raw):
        return L.parse_event(raw)

    def test_chain_prefix_and_drop(self):
        ix = L.Index()
        toks = list(range(5000, 5000 + 64 * 4))
        self.assertTrue(ix.apply("a", self.ev(stored([11, 12], None, toks[:128])), "demo"))
        self.assertTrue(ix.apply("a", self.ev(stored([13], 12, toks[128:192])), "demo"))
        # Unknown parent on pod b (and on a): dropped as llm-d drops it.
        self.assertFalse(ix.apply("b", self.ev(stored([13], 12, toks[128:192])), "demo"))
        self.assertFalse(ix.apply("a", self.ev(stored([99], 98, toks[192:256])), "demo"))
        self.assertEqual(ix.counts["dropped_unknown_parent"], 2)
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a", "b"]), {"a": 3, "b": 0})
        self.assertEqual(ix.longest_prefix(toks[:150], "demo", ["a"]), {"a": 2})
        self.assertEqual(ix.best(toks, "demo"), ("a", 3))
        self.assertEqual(ix.longest_prefix(toks, "other-model", ["a"]), {"a": 0})
        # A different first block shares nothing.
        self.assertEqual(ix.longest_prefix([1] + toks[1:], "demo", ["a"]), {"a": 0})

    def test_speculative_indexing_counts_until_it_expires(self):
        ix = L.Index()
        toks = list(range(64 * 3))
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a", "b"]), {"a": 0, "b": 0})
        ix.speculate(toks[:128], "demo", "b", ttl=0.3)  # a request of two blocks was sent to b
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a", "b"]), {"a": 0, "b": 2})
        time.sleep(0.35)
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a", "b"]), {"a": 0, "b": 0})
        ix.speculate(toks[128:], "demo", "a", ttl=5)
        self.assertEqual(len(ix.speculative), 1)  # the expired entries were forgotten

    def test_teams_share_request_keys(self):
        ix = L.Index()
        toks = list(range(64 * 2))
        ix.apply("a", self.ev(stored([1, 2], None, toks)), "demo")      # team A's engine keys
        ix.apply("a", self.ev(stored([101, 102], None, toks)), "demo")  # team B: other keys, same tokens
        ix.apply("b", self.ev(stored([101, 102], None, toks)), "demo")
        self.assertEqual(len(ix.where), 2)
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a", "b"]), {"a": 2, "b": 2})
        # llm-d's known imprecision: removing team A's copy removes the pod from the shared request key.
        ix.apply("a", self.ev(removed([2])), "demo")
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a", "b"]), {"a": 1, "b": 2})

    def test_tiers_removed_cleared(self):
        ix = L.Index()
        toks = list(range(64 * 2))
        ix.apply("a", self.ev(stored([1, 2], None, toks, "CPU")), "demo")
        ix.apply("a", self.ev(stored([2], 1, toks[64:], "DISK")), "demo")
        rk = L.request_keys(toks, "demo")
        self.assertEqual(ix.where[rk[1]], {("a", "cpu"), ("a", "disk")})
        ix.apply("a", self.ev(removed([2], "CPU")), "demo")
        self.assertEqual(ix.where[rk[1]], {("a", "disk")})
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a"]), {"a": 2})
        ix.apply("a", self.ev(removed([2], "DISK")), "demo")
        self.assertNotIn(rk[1], ix.where)
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a"]), {"a": 1})
        self.assertIsNone(ix.request_key_of("a", 2))
        # A tier update (no tokens) resolves engine keys already known.
        ix.apply("a", self.ev(["BlockStored", [1], None, [], 64, None, "DISK", None]), "demo")
        self.assertEqual(ix.where[rk[0]], {("a", "cpu"), ("a", "disk")})
        ix.apply("b", self.ev(stored([1], None, toks[:64])), "demo")
        ix.apply("a", self.ev(cleared()), "demo")
        self.assertEqual(ix.longest_prefix(toks, "demo", ["a", "b"]), {"a": 0, "b": 1})
        self.assertEqual(ix.engine.get("a"), None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MockPublisher:
    """vLLM's ZmqEventPublisher protocol: PUB [topic, seq, payload], seq from 0; a ROUTER
    answering [id, b"", start] with every buffered [id, b"", seq, payload], then the end marker."""

    def __init__(self, pub, replay, topic=b"kv@127.0.0.1:1@demo", encoding="array"):
        self.ctx = zmq.Context.instance()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        for s, ep in ((self.pub, pub), (self.router, replay)):
            for attempt in range(100):  # a closed socket lets go of its port asynchronously
                try:
                    s.bind(ep)
                    break
                except zmq.ZMQError:
                    if attempt == 99:
                        raise
                    time.sleep(0.02)
        self.topic, self.encoding = topic, encoding
        self.seq = 0
        self.buffer = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve_replay, daemon=True)
        self.thread.start()
        self.publish([cleared()])

    def publish(self, events):
        if self.encoding == "map":
            events = [as_map(e) for e in events]
        payload = L.pack([time.time(), events, 0])
        with self.lock:
            seq = self.seq
            self.seq += 1
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
            self.buffer.append((seq, payload))
        return seq

    def _serve_replay(self):
        while not self.stopping.is_set():
            if not self.router.poll(50):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            ident, _, start = frames
            with self.lock:
                items = [x for x in self.buffer if x[0] >= int.from_bytes(start, "big")]
            for seq, payload in items:
                self.router.send_multipart([ident, b"", seq.to_bytes(8, "big"), payload])
            self.router.send_multipart([ident, b"", L.END_SEQ, b""])

    def close(self):
        self.stopping.set()
        self.thread.join()
        self.pub.close(0)
        self.router.close(0)


def until(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


class SubscriberAndReplay(unittest.TestCase):
    def setUp(self):
        self.pub_ep = "tcp://127.0.0.1:%d" % free_port()
        self.rep_ep = "tcp://127.0.0.1:%d" % free_port()
        self.toks = list(range(7000, 7000 + 64 * 3))

    def joined(self, sub, pub, feed):
        # A SUB joins a bound PUB asynchronously: publish markers until one arrives.
        return until(lambda: (pub.publish([removed([424242])]) is not None and feed.received > 0), 5)

    def test_replay_client(self):
        pub = MockPublisher(self.pub_ep, self.rep_ep)
        try:
            pub.publish([stored([1], None, self.toks[:64])])
            got, ended = L.replay(self.rep_ep, 0)
            self.assertTrue(ended)
            self.assertEqual([s for s, _ in got], [0, 1])
            self.assertEqual([e.type for e in L.decode_payload(got[0][1]).events], ["AllBlocksCleared"])
            got, ended = L.replay(self.rep_ep, 1)
            self.assertEqual(([s for s, _ in got], ended), ([1], True))
            self.assertEqual(L.replay(self.rep_ep, 9), ([], True))
            first = L.replay_first_with_req(self.rep_ep, 0)
            self.assertEqual(first[0], 0)
        finally:
            pub.close()

    def test_replay_cli(self):
        pub = MockPublisher(self.pub_ep, self.rep_ep, encoding="map")
        try:
            pub.publish([stored([1], None, self.toks[:64])])
            out = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               "llmd_index.py"), "replay", self.rep_ep, "--encoding", "map"],
                                 capture_output=True, text=True, timeout=30)
            lines = [json.loads(x) for x in out.stdout.splitlines()]
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertEqual([x.get("seq") for x in lines[:-1]], [0, 1])
            self.assertEqual(lines[1]["events"][0]["block_hashes"], [1])
            self.assertEqual(lines[-1], {"messages": 2, "ended": True, "invalid": 0})
        finally:
            pub.close()

    def test_central_mode(self):
        # The subscriber binds and the publisher connects (vLLM's rule for an endpoint without '*').
        ix = L.Index()
        feed = L.Feed("p0", self.pub_ep, None, "array", bind=True)
        sub = L.Subscriber(ix, [feed]).start()
        ctx = zmq.Context.instance()
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.connect(self.pub_ep)
        try:
            seq = [0]

            def send():
                pub.send_multipart([b"kv@10.0.0.1:8000@demo", seq[0].to_bytes(8, "big"),
                                    batch([stored([seq[0] + 1], seq[0] or None, self.toks[:64])])])
                seq[0] += 1
                return feed.received > 0
            self.assertTrue(until(send, 5))
            self.assertEqual((feed.pod_id, feed.errors), ("10.0.0.1:8000", []))
        finally:
            sub.stop()
            pub.close(0)

    def test_live_stream_restart_and_catch_up(self):
        pub = MockPublisher(self.pub_ep, self.rep_ep)
        ix = L.Index()
        feed = L.Feed("p0", self.pub_ep, self.rep_ep, "array")
        sub = L.Subscriber(ix, [feed], catch_up=True, contract={}).start()
        try:
            self.assertTrue(self.joined(sub, pub, feed))
            pub.publish([stored([1, 2], None, self.toks[:128])])
            pub.publish([stored([3], 2, self.toks[128:])])
            self.assertTrue(sub.wait_for(lambda: ix.longest_prefix(self.toks, "demo", ["p0"])["p0"] == 3, 5))
            with ix.lock:
                seqs = [s for s, _, _ in feed.log]
                self.assertEqual(seqs, list(range(seqs[0], seqs[-1] + 1)))
                self.assertEqual(seqs[0], 0)  # seq 0 came by replay (catch_up on join)
                self.assertEqual(feed.log[0][2], "replay")
                self.assertEqual((feed.pod_id, feed.model), ("127.0.0.1:1", "demo"))
                self.assertEqual(feed.restarts, [])
                self.assertEqual([e for e in feed.errors if "424242" not in e[1]], [])
            # The publisher restarts on the same endpoints: seq goes back, the pod is cleared.
            # (Seq alone cannot tell a restart whose new seq passed the old one from a gap: let
            # the old life reach seq 50, and publish slowly in the new one.)
            for _ in range(50):
                pub.publish([removed([424242])])
            self.assertTrue(sub.wait_for(lambda: feed.last_seq == pub.seq - 1, 5))
            last = pub.seq - 1
            pub.close()
            pub = MockPublisher(self.pub_ep, self.rep_ep)

            def republish():
                pub.publish([stored([1], None, self.toks[:64])])
                time.sleep(0.1)
                return len(feed.restarts) > 0
            self.assertTrue(until(republish, 10))
            self.assertTrue(sub.wait_for(lambda: ix.longest_prefix(self.toks, "demo", ["p0"])["p0"] == 1, 5))
            with ix.lock:
                self.assertEqual(feed.restarts[0][0], last)
                self.assertLess(feed.restarts[0][1], last)
                after = [m for s, m, _ in feed.log if s == 0]
                self.assertEqual(len(after), 2)  # seq 0 of each life, the second by replay or live
        finally:
            sub.stop()
            pub.close()

    def test_map_feed_and_errors(self):
        pub = MockPublisher(self.pub_ep, self.rep_ep, encoding="map")
        ix = L.Index()
        feed = L.Feed("p0", self.pub_ep, None, "array")  # demands arrays: every map message is an error
        sub = L.Subscriber(ix, [feed]).start()
        try:
            self.assertTrue(until(lambda: pub.publish([removed([1])]) is not None and len(feed.errors) > 0, 5))
            with ix.lock:
                self.assertIn("expected array", feed.errors[0][1])
        finally:
            sub.stop()
            pub.close()

    def test_serve_cli(self):
        pub = MockPublisher(self.pub_ep, self.rep_ep)
        port = free_port()
        proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                              "llmd_index.py"), "serve",
                                 "--listen", "127.0.0.1:%d" % port, "--pod", "r0=" + self.pub_ep,
                                 "--replay", "r0=" + self.rep_ep, "--catch-up"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            self.assertIn(b"serving", proc.stdout.readline())

            def score():
                req = urllib.request.Request("http://127.0.0.1:%d/score" % port,
                                             json.dumps({"token_ids": self.toks, "model": "demo"}).encode(),
                                             {"content-type": "application/json"})
                return json.load(urllib.request.urlopen(req, timeout=5))

            self.assertTrue(until(lambda: pub.publish([stored([1, 2, 3], None, self.toks)]) is not None
                                  and score()["scores"] == {"r0": 3}, 10), score())
            stats = json.load(urllib.request.urlopen("http://127.0.0.1:%d/stats" % port, timeout=5))
            self.assertEqual(stats["pods"]["r0"]["topic"], "kv@127.0.0.1:1@demo")
        finally:
            proc.terminate()
            proc.wait(10)
            proc.stdout.close()
            pub.close()


if __name__ == "__main__":
    unittest.main()
