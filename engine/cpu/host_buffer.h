// HostBuffer: a growable scratch array in anonymous memory, backed by
// transparent huge pages where the kernel allows (madvise mode): activation
// buffers of a long prefill are hundreds of MB, and faulting them in 4 KB
// pages (plus zeroing them a second time, as std::vector does) costs more than
// some kernels that use them.
//
// Contents are NOT preserved when the buffer grows and new memory is not
// initialized by this class (the kernel hands out zeroed pages). Move-only;
// not thread-safe.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace lg::engine::cpu {

template <typename T>
class HostBuffer {
 public:
  HostBuffer() = default;
  ~HostBuffer() { release(); }
  HostBuffer(HostBuffer&& other) noexcept : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  HostBuffer& operator=(HostBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  // At least n elements; aborts if the memory cannot be mapped (like new).
  T* ensure(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes <= bytes_) return data_;
    release();
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();  // as std::vector would: out of memory is fatal here
    ::madvise(p, size, MADV_HUGEPAGE);
    data_ = static_cast<T*>(p);
    bytes_ = size;
    return data_;
  }
  T* data() const { return data_; }
  size_t capacity() const { return bytes_ / sizeof(T); }

 private:
  void release() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }

  T* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lg::engine::cpu
