#include "cache/kv_events/kv_event_encoding.h"

#include <bit>
#include <cstring>

namespace lg::cache::kv_events {

uint64_t externalBlockHash(const Digest& key) {
  uint64_t v = 0;
  for (size_t i = key.bytes.size() - 8; i < key.bytes.size(); ++i) v = (v << 8) | key.bytes[i];
  return v;
}

std::string sequenceFrame(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) out[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
  return out;
}

void MsgpackWriter::be(uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void MsgpackWriter::array(size_t n) {
  if (n <= 15) {
    out_.push_back(static_cast<char>(0x90 | n));
  } else if (n <= 0xffff) {
    out_.push_back(static_cast<char>(0xdc));
    be(n, 2);
  } else {
    out_.push_back(static_cast<char>(0xdd));
    be(n, 4);
  }
}

void MsgpackWriter::map(size_t n) {
  if (n <= 15) {
    out_.push_back(static_cast<char>(0x80 | n));
  } else if (n <= 0xffff) {
    out_.push_back(static_cast<char>(0xde));
    be(n, 2);
  } else {
    out_.push_back(static_cast<char>(0xdf));
    be(n, 4);
  }
}

void MsgpackWriter::str(std::string_view s) {
  const size_t n = s.size();
  if (n <= 31) {
    out_.push_back(static_cast<char>(0xa0 | n));
  } else if (n <= 0xff) {
    out_.push_back(static_cast<char>(0xd9));
    be(n, 1);
  } else if (n <= 0xffff) {
    out_.push_back(static_cast<char>(0xda));
    be(n, 2);
  } else {
    out_.push_back(static_cast<char>(0xdb));
    be(n, 4);
  }
  out_.append(s);
}

void MsgpackWriter::nil() { out_.push_back(static_cast<char>(0xc0)); }

void MsgpackWriter::uint(uint64_t v) {
  if (v <= 0x7f) {
    out_.push_back(static_cast<char>(v));
  } else if (v <= 0xff) {
    out_.push_back(static_cast<char>(0xcc));
    be(v, 1);
  } else if (v <= 0xffff) {
    out_.push_back(static_cast<char>(0xcd));
    be(v, 2);
  } else if (v <= 0xffffffffULL) {
    out_.push_back(static_cast<char>(0xce));
    be(v, 4);
  } else {
    out_.push_back(static_cast<char>(0xcf));
    be(v, 8);
  }
}

void MsgpackWriter::sint(int64_t v) {
  if (v >= 0) return uint(static_cast<uint64_t>(v));
  if (v >= -32) {
    out_.push_back(static_cast<char>(static_cast<int8_t>(v)));
  } else if (v >= INT8_MIN) {
    out_.push_back(static_cast<char>(0xd0));
    be(static_cast<uint64_t>(v), 1);
  } else if (v >= INT16_MIN) {
    out_.push_back(static_cast<char>(0xd1));
    be(static_cast<uint64_t>(v), 2);
  } else if (v >= INT32_MIN) {
    out_.push_back(static_cast<char>(0xd2));
    be(static_cast<uint64_t>(v), 4);
  } else {
    out_.push_back(static_cast<char>(0xd3));
    be(static_cast<uint64_t>(v), 8);
  }
}

void MsgpackWriter::f64(double v) {
  out_.push_back(static_cast<char>(0xcb));
  be(std::bit_cast<uint64_t>(v), 8);
}

namespace {

void hashes(MsgpackWriter& w, const std::vector<uint64_t>& h) {
  w.array(h.size());
  for (uint64_t v : h) w.uint(v);
}

void parent(MsgpackWriter& w, const std::optional<uint64_t>& p) {
  if (p) {
    w.uint(*p);
  } else {
    w.nil();
  }
}

void tokens(MsgpackWriter& w, const std::vector<int32_t>& ids) {
  w.array(ids.size());
  for (int32_t id : ids) w.sint(id);
}

void arrayEvent(MsgpackWriter& w, const KvEvent& e) {
  switch (e.kind) {
    case KvEvent::Kind::kBlockStored:
      w.array(8);
      w.str("BlockStored");
      hashes(w, e.block_hashes);
      parent(w, e.parent_block_hash);
      tokens(w, e.token_ids);
      w.sint(e.block_size);
      w.nil();  // lora_id
      w.str(e.medium);
      w.nil();  // lora_name
      return;
    case KvEvent::Kind::kBlockRemoved:
      w.array(3);
      w.str("BlockRemoved");
      hashes(w, e.block_hashes);
      w.str(e.medium);
      return;
    case KvEvent::Kind::kAllBlocksCleared:
      w.array(1);
      w.str("AllBlocksCleared");
      return;
  }
}

// msgspec's map form: fields in declaration order; those without a default
// (lora_id, medium, lora_name) are written even when nil.
void mapEvent(MsgpackWriter& w, const KvEvent& e) {
  switch (e.kind) {
    case KvEvent::Kind::kBlockStored:
      w.map(8);
      w.str("type");
      w.str("BlockStored");
      w.str("block_hashes");
      hashes(w, e.block_hashes);
      w.str("parent_block_hash");
      parent(w, e.parent_block_hash);
      w.str("token_ids");
      tokens(w, e.token_ids);
      w.str("block_size");
      w.sint(e.block_size);
      w.str("lora_id");
      w.nil();
      w.str("medium");
      w.str(e.medium);
      w.str("lora_name");
      w.nil();
      return;
    case KvEvent::Kind::kBlockRemoved:
      w.map(3);
      w.str("type");
      w.str("BlockRemoved");
      w.str("block_hashes");
      hashes(w, e.block_hashes);
      w.str("medium");
      w.str(e.medium);
      return;
    case KvEvent::Kind::kAllBlocksCleared:
      w.map(1);
      w.str("type");
      w.str("AllBlocksCleared");
      return;
  }
}

}  // namespace

std::string encodeBatch(double ts, std::span<const KvEvent> events, EventEncoding encoding, int64_t data_parallel_rank) {
  MsgpackWriter w;
  w.array(3);
  w.f64(ts);
  w.array(events.size());
  for (const KvEvent& e : events) {
    if (encoding == EventEncoding::kMap) {
      mapEvent(w, e);
    } else {
      arrayEvent(w, e);
    }
  }
  w.sint(data_parallel_rank);
  return w.take();
}

}  // namespace lg::cache::kv_events
