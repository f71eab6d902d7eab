#include "engine/cuda/device_latent_pool.h"

#include <cstring>
#include <vector>

namespace lg::engine::cuda {

Result<std::unique_ptr<DeviceLatentPool>> DeviceLatentPool::create(const LatentLayout& layout, int32_t num_blocks,
                                                                   std::string numerics) {
  if (num_blocks < 0) return invalidArgument("latent pool: negative block count");
  std::unique_ptr<DeviceLatentPool> pool(new DeviceLatentPool(layout, num_blocks, std::move(numerics)));
  LG_RETURN_IF_ERROR(pool->memory_.ensure(std::max<size_t>(layout.blockBytes() * static_cast<size_t>(num_blocks), 1)));
  LG_RETURN_IF_ERROR(pool->copy_stream_.create());
  return pool;
}

Status DeviceLatentPool::exportBlocks(std::span<const BlockId> ids, std::span<uint8_t> bytes) const {
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "exportBlocks", ids, bytes.size(), false));
  const size_t bb = layout_.blockBytes();
  std::lock_guard lock(mu_);
  LG_RETURN_IF_ERROR(staging_.ensure(bytes.size()));
  for (size_t i = 0; i < ids.size(); ++i) {
    LG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_.get<uint8_t>() + i * bb, memory_.get<uint8_t>() + ids[i] * bb, bb,
                                            cudaMemcpyDeviceToHost, copy_stream_.get()),
                            "exportBlocks");
  }
  LG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_.get()), "exportBlocks");
  std::memcpy(bytes.data(), staging_.get(), bytes.size());
  return Status::ok();
}

Status DeviceLatentPool::importBlocks(std::span<const BlockId> ids, std::span<const uint8_t> bytes) {
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "importBlocks", ids, bytes.size(), true));
  const size_t bb = layout_.blockBytes();
  std::lock_guard lock(mu_);
  LG_RETURN_IF_ERROR(staging_.ensure(bytes.size()));
  std::memcpy(staging_.get(), bytes.data(), bytes.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    LG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(memory_.get<uint8_t>() + ids[i] * bb, staging_.get<uint8_t>() + i * bb, bb,
                                            cudaMemcpyHostToDevice, copy_stream_.get()),
                            "importBlocks");
  }
  return cudaStatus(cudaStreamSynchronize(copy_stream_.get()), "importBlocks");
}

Status DeviceLatentPool::copyBlocks(std::span<const BlockCopy> copies) {
  std::vector<BlockId> src, dst;
  for (const BlockCopy& c : copies) {
    src.push_back(c.src);
    dst.push_back(c.dst);
  }
  const size_t bb = layout_.blockBytes();
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "copyBlocks source", src, src.size() * bb, false));
  LG_RETURN_IF_ERROR(checkBlockTransfer(allocator_, layout_, "copyBlocks destination", dst, dst.size() * bb, true));
  std::lock_guard lock(mu_);
  for (const BlockCopy& c : copies) {
    LG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(memory_.get<uint8_t>() + c.dst * bb, memory_.get<uint8_t>() + c.src * bb, bb,
                                            cudaMemcpyDeviceToDevice, copy_stream_.get()),
                            "copyBlocks");
  }
  return cudaStatus(cudaStreamSynchronize(copy_stream_.get()), "copyBlocks");
}

}  // namespace lg::engine::cuda
