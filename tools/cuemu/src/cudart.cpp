// The subset of the CUDA runtime API that prefixhit's host code and tests call: memory (device
// memory is host memory, so ASan sees kernel overruns), copies, streams, events, errors, device
// queries. Stream work runs at once, in issue order.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "cuemu/cuemu.hpp"
#include "internal.hpp"

namespace {

using cuemu::detail::config;
using cuemu::detail::set_error;

struct Alloc {
  std::size_t size;
  cudaMemoryType type;
};
std::mutex g_mutex;
std::map<std::uintptr_t, Alloc>& allocs() {
  static std::map<std::uintptr_t, Alloc> m;
  return m;
}
std::set<const void*>& streams() {
  static std::set<const void*> s;
  return s;
}
struct Event {
  std::chrono::steady_clock::time_point t;
  bool recorded = false;
};
std::set<const void*>& events() {
  static std::set<const void*> s;
  return s;
}

cudaError_t ret(cudaError_t e) {
  set_error(e);
  return e;
}

/// The allocation holding [p, p+bytes), if any.
const Alloc* find_alloc(const void* p, std::size_t bytes, std::uintptr_t* base = nullptr) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto& m = allocs();
  auto it = m.upper_bound(a);
  if (it == m.begin())
    return nullptr;
  --it;
  if (a < it->first || a + bytes > it->first + std::max<std::size_t>(it->second.size, 1))
    return nullptr;
  if (base)
    *base = it->first;
  return &it->second;
}

cudaError_t do_alloc(void** p, std::size_t bytes, cudaMemoryType type) {
  if (p == nullptr)
    return ret(cudaErrorInvalidValue);
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  // A device has finite memory: refuse what an H200 could not hold (CUEMU_MEM_GB, default 140)
  // with cudaErrorMemoryAllocation, as the runtime does, instead of asking the host for it.
  if (bytes > config().mem_bytes)
    return ret(cudaErrorMemoryAllocation);
  void* m = nullptr;
  if (posix_memalign(&m, 256, std::max<std::size_t>(bytes, 1)) != 0)
    return ret(cudaErrorMemoryAllocation);
  std::memset(m, 0xA5, bytes);  // device memory is not zeroed: make reliance on it visible
  std::lock_guard<std::mutex> lock(g_mutex);
  allocs()[reinterpret_cast<std::uintptr_t>(m)] = Alloc{bytes, type};
  *p = m;
  return cudaSuccess;
}

cudaError_t do_free(void* p, cudaMemoryType type) {
  if (p == nullptr)
    return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = allocs().find(reinterpret_cast<std::uintptr_t>(p));
  if (it == allocs().end() || it->second.type != type)
    return ret(cudaErrorInvalidValue);
  allocs().erase(it);
  std::free(p);
  return cudaSuccess;
}

bool valid_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
    return true;
  std::lock_guard<std::mutex> lock(g_mutex);
  return streams().count(s) != 0;
}

bool device_side(const void* p, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Alloc* a = find_alloc(p, bytes);
  return a != nullptr && a->type != cudaMemoryTypeHost;
}

cudaError_t do_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (bytes == 0)
    return cudaSuccess;
  if (dst == nullptr || src == nullptr)
    return ret(cudaErrorInvalidValue);
  const bool dst_dev = device_side(dst, bytes);
  const bool src_dev = device_side(src, bytes);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dst_dev)
        return ret(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToHost:
      if (!src_dev)
        return ret(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToDevice:
      if (!dst_dev || !src_dev)
        return ret(cudaErrorInvalidValue);
      break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      break;
    default:
      return ret(cudaErrorInvalidMemcpyDirection);
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t do_memset(void* p, int value, std::size_t bytes) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (bytes == 0)
    return cudaSuccess;
  if (!device_side(p, bytes))
    return ret(cudaErrorInvalidValue);
  std::memset(p, value, bytes);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  return do_alloc(p, bytes, cudaMemoryTypeDevice);
}
cudaError_t cudaMallocManaged(void** p, size_t bytes, unsigned int) {
  return do_alloc(p, bytes, cudaMemoryTypeManaged);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return do_alloc(p, bytes, cudaMemoryTypeHost);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  return do_alloc(p, bytes, cudaMemoryTypeHost);
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
  if (!valid_stream(s))
    return ret(cudaErrorInvalidResourceHandle);
  return do_alloc(p, bytes, cudaMemoryTypeDevice);
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr)
    return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = allocs().find(reinterpret_cast<std::uintptr_t>(p));
    if (it != allocs().end() && it->second.type == cudaMemoryTypeManaged)
      it->second.type = cudaMemoryTypeDevice;
  }
  return do_free(p, cudaMemoryTypeDevice);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (!valid_stream(s))
    return ret(cudaErrorInvalidResourceHandle);
  return cudaFree(p);
}
cudaError_t cudaFreeHost(void* p) {
  return do_free(p, cudaMemoryTypeHost);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return do_copy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (!valid_stream(s))
    return ret(cudaErrorInvalidResourceHandle);
  return do_copy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  return do_memset(p, value, bytes);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  if (!valid_stream(s))
    return ret(cudaErrorInvalidResourceHandle);
  return do_memset(p, value, bytes);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (s == nullptr)
    return ret(cudaErrorInvalidValue);
  *s = reinterpret_cast<cudaStream_t>(new char[16]);
  std::lock_guard<std::mutex> lock(g_mutex);
  streams().insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  return cudaStreamCreate(s);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int, int) {
  return cudaStreamCreate(s);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (streams().erase(s) == 0)
    return ret(cudaErrorInvalidResourceHandle);
  delete[] reinterpret_cast<char*>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return valid_stream(s) ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  return cudaStreamSynchronize(s);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t, unsigned int) {
  return cudaStreamSynchronize(s);
}
cudaError_t cudaDeviceSynchronize(void) {
  return config().no_device ? ret(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (e == nullptr)
    return ret(cudaErrorInvalidValue);
  *e = reinterpret_cast<cudaEvent_t>(new Event());
  std::lock_guard<std::mutex> lock(g_mutex);
  events().insert(*e);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  return cudaEventCreate(e);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (events().erase(e) == 0)
    return ret(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!valid_stream(s))
    return ret(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (events().count(e) == 0)
      return ret(cudaErrorInvalidResourceHandle);
  }
  auto* ev = reinterpret_cast<Event*>(e);
  ev->t = std::chrono::steady_clock::now();
  ev->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) {
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (ms == nullptr)
    return ret(cudaErrorInvalidValue);
  auto* x = reinterpret_cast<Event*>(a);
  auto* y = reinterpret_cast<Event*>(b);
  if (!x->recorded || !y->recorded)
    return ret(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(y->t - x->t).count();
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  return cuemu::detail::last_error(true);
}
cudaError_t cudaPeekAtLastError(void) {
  return cuemu::detail::last_error(false);
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    default:
      return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    default:
      return "unknown error (cuemu)";
  }
}

cudaError_t cudaGetDeviceCount(int* n) {
  if (n == nullptr)
    return ret(cudaErrorInvalidValue);
  // As the runtime does on a machine without a device: a count of 0 and cudaErrorNoDevice.
  *n = config().no_device ? 0 : 1;
  return config().no_device ? ret(cudaErrorNoDevice) : cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (d == nullptr)
    return ret(cudaErrorInvalidValue);
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  return d == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceReset(void) {
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (value == nullptr || device != 0)
    return ret(cudaErrorInvalidValue);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = cuemu::detail::config().sm_count;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = 48 * 1024;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = 2048;
      break;
    case cudaDevAttrMaxGridDimX:
      *value = 0x7fffffff;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = 1024;
      break;
    default:
      *value = 0;
      break;
  }
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (prop == nullptr || device != 0)
    return ret(cudaErrorInvalidValue);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "cuemu CPU emulation");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = cuemu::detail::config().sm_count;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->totalGlobalMem = config().mem_bytes;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  if (attr == nullptr)
    return ret(cudaErrorInvalidValue);
  std::memset(attr, 0, sizeof *attr);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::uintptr_t base = 0;
  const Alloc* a = find_alloc(p, 1, &base);
  attr->type = a ? a->type : cudaMemoryTypeUnregistered;
  attr->device = 0;
  attr->devicePointer = a ? const_cast<void*>(p) : nullptr;
  attr->hostPointer =
      (a == nullptr || a->type != cudaMemoryTypeDevice) ? const_cast<void*>(p) : nullptr;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*, int block_size,
                                                          size_t) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (blocks == nullptr || block_size <= 0)
    return ret(cudaErrorInvalidValue);
  *blocks = std::max(1, 2048 / block_size);
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* f,
                                                                   int block_size, size_t smem,
                                                                   unsigned int) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, block_size, smem);
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void*) {
  if (config().no_device)
    return ret(cudaErrorNoDevice);
  if (attr == nullptr)
    return ret(cudaErrorInvalidValue);
  std::memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  return cudaSuccess;
}

}  // extern "C"
