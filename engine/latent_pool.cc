#include "engine/latent_pool.h"

#include <string>

namespace lg::engine {

Status checkBlockTransfer(const BlockAllocator& allocator, const LatentLayout& layout, std::string_view what,
                          std::span<const BlockId> ids, size_t bytes, bool exclusive) {
  if (bytes != ids.size() * layout.blockBytes()) {
    return invalidArgument(std::string(what) + ": " + std::to_string(bytes) + " bytes for " +
                           std::to_string(ids.size()) + " blocks of " + std::to_string(layout.blockBytes()));
  }
  for (BlockId id : ids) {
    const int32_t refs = allocator.refCount(id);
    if (refs <= 0) return invalidArgument(std::string(what) + ": block " + std::to_string(id) + " is not allocated");
    // Writing into a block someone else also holds would change latents they
    // already read as cached: refused in every build.
    if (exclusive && refs != 1) {
      return invalidArgument(std::string(what) + ": block " + std::to_string(id) + " is shared (" +
                             std::to_string(refs) + " references)");
    }
  }
  return Status::ok();
}

}  // namespace lg::engine
