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

// Device memory, freed on destruction; grows on demand (contents not kept).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` (never less than before); ResourceExhausted if the
  // device has no room.
  Status ensure(size_t bytes) {
    if (bytes <= bytes_) return Status::ok();
    reset();
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      ptr_ = nullptr;
      (void)cudaGetLastError();  // clear the sticky-free error state of a failed allocation
      return resourceExhausted("CUDA: cannot allocate " + std::to_string(bytes) + " bytes of device memory");
    }
    bytes_ = bytes;
    return Status::ok();
  }
  void reset() {
    if (ptr_) cudaFree(ptr_);
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

// Page-locked host memory (cudaHostAlloc): what asynchronous copies need.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status ensure(size_t bytes) {
    if (bytes <= bytes_) return Status::ok();
    reset();
    if (cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault) != cudaSuccess) {
      ptr_ = nullptr;
      (void)cudaGetLastError();
      return resourceExhausted("CUDA: cannot allocate " + std::to_string(bytes) + " bytes of pinned host memory");
    }
    bytes_ = bytes;
    return Status::ok();
  }
  void reset() {
    if (ptr_) cudaFreeHost(ptr_);
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
