#include "engine/cpu/host_latent_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace lg::engine {

Result<std::unique_ptr<HostLatentPool>> HostLatentPool::create(const LatentLayout& layout, int32_t num_blocks,
                                                               std::string numerics) {
  if (num_blocks < 0) return invalidArgument("latent pool: negative block count");
  const size_t size = std::max<size_t>(layout.blockBytes() * static_cast<size_t>(num_blocks), 1);
  // MAP_NORESERVE: a pool sized for many long contexts costs only what is used.
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return resourceExhausted("cannot map " + std::to_string(size) + " bytes for the latent block pool");
  }
  ::madvise(p, size, MADV_HUGEPAGE);
  return std::unique_ptr<HostLatentPool>(
      new HostLatentPool(layout, num_blocks, static_cast<uint8_t*>(p), size, std::move(numerics)));
}

HostLatentPool::HostLatentPool(const LatentLayout& layout, int32_t num_blocks, uint8_t* data, size_t size,
                               std::string numerics)
    : layout_(layout), numerics_(std::move(numerics)), allocator_(num_blocks), data_(data), size_(size) {}

HostLatentPool::~HostLatentPool() { ::munmap(data_, size_); }

Status HostLatentPool::exportBlocks(std::span<const BlockId> ids, std::span<uint8_t> bytes) const {
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "exportBlocks", ids, bytes.size(), false));
  const size_t bb = layout_.blockBytes();
  for (size_t i = 0; i < ids.size(); ++i) std::memcpy(bytes.data() + i * bb, blockData(ids[i]), bb);
  return Status::ok();
}

Status HostLatentPool::importBlocks(std::span<const BlockId> ids, std::span<const uint8_t> bytes) {
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "importBlocks", ids, bytes.size(), true));
  const size_t bb = layout_.blockBytes();
  for (size_t i = 0; i < ids.size(); ++i) std::memcpy(blockData(ids[i]), bytes.data() + i * bb, bb);
  return Status::ok();
}

Status HostLatentPool::copyBlocks(std::span<const BlockCopy> copies) {
  std::vector<BlockId> src, dst;
  for (const BlockCopy& c : copies) {
    src.push_back(c.src);
    dst.push_back(c.dst);
  }
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "copyBlocks source", src, src.size() * layout_.blockBytes(), false));
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "copyBlocks destination", dst, dst.size() * layout_.blockBytes(), true));
  for (const BlockCopy& c : copies) std::memcpy(blockData(c.dst), blockData(c.src), layout_.blockBytes());
  return Status::ok();
}

}  // namespace lg::engine
