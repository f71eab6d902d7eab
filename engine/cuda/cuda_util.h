// The CUDA backend's edge to the CUDA runtime and cuBLAS: their error codes
// as Status, and owning handles for device memory, pinned host memory,
// streams and events. Only engine/cuda/ includes this.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"

namespace lg::engine::cuda {

inline Status cudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return internalError(std::string("CUDA: ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status cublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return internalError(std::string("cuBLAS: ") + what + ": " + cublasGetStatusName(s));
}

#define LG_CUDA_RETURN_IF_ERROR(expr, what) LG_RETURN_IF_ERROR(::lg::engine::cuda::cudaStatus((expr), (what)))
#define LG_CUBLAS_RETURN_IF_ERROR(expr, what) LG_RETURN_IF_ERROR(::lg::engine::cuda::cublasStatus((expr), (what)))

// CUDA memory of one kind, freed on destruction; grows on demand (the
// contents are not kept when it grows).
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*), const char* kWhat>
class CudaMemory {
 public:
  CudaMemory() = default;
  ~CudaMemory() { reset(); }
  CudaMemory(CudaMemory&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaMemory& operator=(CudaMemory&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  // At least `bytes` (never less than before); ResourceExhausted if there is no room.
  Status ensure(size_t bytes) {
    if (bytes <= bytes_) return Status::ok();
    reset();
    if (Alloc(&ptr_, bytes) != cudaSuccess) {
      ptr_ = nullptr;
      (void)cudaGetLastError();  // a failed allocation leaves no sticky error behind
      return resourceExhausted(std::string("CUDA: cannot allocate ") + std::to_string(bytes) + " bytes of " + kWhat);
    }
    bytes_ = bytes;
    return Status::ok();
  }
  void reset() {
    if (ptr_) Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline cudaError_t deviceAlloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline cudaError_t pinnedAlloc(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocDefault); }
inline constexpr char kDeviceMemory[] = "device memory";
inline constexpr char kPinnedMemory[] = "pinned host memory";

using DeviceBuffer = CudaMemory<deviceAlloc, cudaFree, kDeviceMemory>;
// Page-locked host memory (cudaHostAlloc): what asynchronous copies need.
using PinnedBuffer = CudaMemory<pinnedAlloc, cudaFreeHost, kPinnedMemory>;

class Stream {
 public:
  Stream() = default;
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Status create() { return cudaStatus(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace lg::engine::cuda
