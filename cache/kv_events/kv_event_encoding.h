// vLLM's KV-event wire format (vllm/distributed/kv_events.py; the facts and
// golden bytes are in the design notes, kv-events.md): the msgpack payload of
// one published message, `[ts, [events...], data_parallel_rank]`, each event
// either vLLM's positional array (`["BlockStored", block_hashes,
// parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]`,
// `["BlockRemoved", block_hashes, medium]`, `["AllBlocksCleared"]`) or, with
// the map encoding, a map keyed by field name with "type" as the tag.
//
// The positional form stops after lora_name on purpose: vLLM's later
// optional fields (extra_keys, group_idx, ...) are omitted when default, and
// Dynamo reads slots 9 and 10 as other fields than vLLM, so nothing is ever
// written there. No team or namespace goes into extra_keys either: llm-d
// reads strings there as multimodal hashes and would then match nothing.
//
// msgpack is written by hand (msgpack_writer below): the subset used here is
// small, and Debian's msgpack-c development packages cannot be installed
// beside the Boost this project builds with (docs/dependencies.md). Its bytes
// are checked against the golden bytes and against Python's msgpack.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/fingerprint.h"

namespace lg::cache::kv_events {

enum class EventEncoding : uint8_t { kArray, kMap };

struct KvEvent {
  enum class Kind : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kAllBlocksCleared;
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;  // kBlockStored: nil for a prompt's first block
  std::vector<int32_t> token_ids;             // kBlockStored: every token of every block, in order
  int32_t block_size = 0;                     // kBlockStored
  std::string medium;                         // kBlockStored, kBlockRemoved: "GPU", "CPU", "DISK"
};

// The id a block is published under: the last 8 bytes of its 32-byte chain
// key, big-endian (what vLLM publishes of its own SHA-256 block hashes).
uint64_t externalBlockHash(const Digest& key);

// The payload of one message. `ts`: Unix seconds (msgpack float64, as msgspec writes it).
std::string encodeBatch(double ts, std::span<const KvEvent> events, EventEncoding encoding, int64_t data_parallel_rank = 0);

// The 8-byte big-endian sequence number frame.
std::string sequenceFrame(uint64_t seq);
inline constexpr uint64_t kReplayEndSeq = ~uint64_t{0};

// A minimal msgpack writer: the smallest encoding of each value, as the
// msgpack specification and Python's msgpack write them.
class MsgpackWriter {
 public:
  void array(size_t n);
  void map(size_t n);
  void str(std::string_view s);
  void nil();
  void uint(uint64_t v);
  void sint(int64_t v);
  void f64(double v);
  std::string take() { return std::move(out_); }

 private:
  void be(uint64_t v, int bytes);
  std::string out_;
};

}  // namespace lg::cache::kv_events
