#include "common/malloc_tuning.h"

#include <malloc.h>

namespace lg {

void keepFreedMemoryForReuse() {
  // Fixing these also turns off glibc's dynamic threshold adjustment.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);  // grow the heap 16 MiB at a time: fewer brk calls
}

}  // namespace lg
