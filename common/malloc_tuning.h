// Process-wide allocator settings for a server that repeatedly allocates and
// frees buffers of hundreds of KB to MBs (restored latent blocks, RocksDB's
// blob read buffers, request bodies).
//
// glibc returns such memory to the kernel as soon as it is freed (chunks above
// the mmap threshold are unmapped; a free heap top above the trim threshold is
// trimmed), so the next allocation of the same size faults every page in
// again. On the VMs this project runs on a page fault costs ~12 us (touching
// 1 GiB of fresh 4 KB pages takes 3.2 s), which made a 90 MB restore from the
// disk tier 4 to 8 times slower than with the memory kept (docs/cache.md).
//
// Call once at the start of main(), before any thread starts. Libraries never
// call it: the choice belongs to the program.
#pragma once

namespace lg {

// Keeps freed memory for reuse: allocations up to 32 MiB come from the heap,
// and up to 256 MiB of free heap is kept per arena instead of being returned.
void keepFreedMemoryForReuse();

}  // namespace lg
