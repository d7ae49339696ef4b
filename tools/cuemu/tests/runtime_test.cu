// cuemu's atomics, spin-wait progress, runtime API (memory, streams, events, errors), the CUB
// shim and the no-device switch.
#include <gtest/gtest.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/device/device_reduce.cuh>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "test_util.hpp"

namespace {

using cuemu_test::DeviceArray;

struct Counters {
  int add;
  int sub;
  int min;
  int max;
  unsigned inc;
  unsigned dec;
  unsigned long long add64;
  unsigned long long cas_winners;
  unsigned bits_or;
  unsigned bits_and;
  unsigned exch;
  float fadd;
};

__global__ void hammer(Counters* c, int* claimed) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(&c->add, 2);
  atomicSub(&c->sub, 1);
  atomicMin(&c->min, 1000 - i);
  atomicMax(&c->max, i);
  atomicInc(&c->inc, 9U);  // wraps to 0 after 9
  atomicDec(&c->dec, 1000U);
  atomicAdd(&c->add64, static_cast<unsigned long long>(i) << 20);
  // 1 winner per slot: threads i and i+256 race for claimed[i % 256].
  if (atomicCAS(&claimed[i % 256], -1, i) == -1)
    atomicAdd(&c->cas_winners, 1ULL);
  atomicOr(&c->bits_or, 1U << (i % 32));
  atomicAnd(&c->bits_and, ~(1U << (i % 16)));
  atomicExch(&c->exch, static_cast<unsigned>(i));
  atomicAdd(&c->fadd, 0.5F);
}

TEST(CuemuRuntime, AtomicsAreExactUnderManyThreads) {
  const int n = 512;
  Counters init{};
  init.min = 1 << 30;
  init.max = -1;
  init.dec = 2000;
  init.bits_and = 0xffffffffU;
  DeviceArray<Counters> c(1, {init});
  DeviceArray<int> claimed(256, std::vector<int>(256, -1));
  ::cuemu::launch(4, 128)(hammer, c.ptr, claimed.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const Counters r = c.get()[0];
  EXPECT_EQ(r.add, 2 * n);
  EXPECT_EQ(r.sub, -n);
  EXPECT_EQ(r.min, 1000 - (n - 1));
  EXPECT_EQ(r.max, n - 1);
  EXPECT_EQ(r.inc, static_cast<unsigned>(n % 10));
  EXPECT_EQ(r.dec, 1000U - static_cast<unsigned>(n - 1));  // 2000 > limit: reset to 1000 first
  unsigned long long sum = 0;
  for (int i = 0; i < n; ++i)
    sum += static_cast<unsigned long long>(i) << 20;
  EXPECT_EQ(r.add64, sum);
  EXPECT_EQ(r.cas_winners, 256ULL);
  EXPECT_EQ(r.bits_or, 0xffffffffU);
  EXPECT_EQ(r.bits_and, 0xffff0000U);
  EXPECT_LT(r.exch, static_cast<unsigned>(n));
  EXPECT_EQ(r.fadd, 256.0F);
}

// Every thread reads a shared word, then tries one CAS from what it read, without retrying: the
// bug pattern of a lock-free update that ignores a failed CAS. With preemption, a schedule may
// run another thread between the read and the CAS, so some CAS must fail (a lost update); the
// retrying twin never loses one. This needs a scheduling point before an atomic, not just after.
__global__ void read_then_cas(unsigned* once, unsigned* retry) {
  unsigned seen = __ldcg(once);
  atomicCAS(once, seen, seen + 1U);
  seen = __ldcg(retry);
  for (unsigned prev; (prev = atomicCAS(retry, seen, seen + 1U)) != seen;)
    seen = prev;
}

TEST(CuemuPreemption, ReadThenCasRacesAreExposed) {
  const char* preempt = std::getenv("CUEMU_PREEMPT");
  if (preempt == nullptr || std::atof(preempt) <= 0.0)
    GTEST_SKIP() << "needs CUEMU_PREEMPT > 0 (its own ctest entry sets it)";
  const unsigned n = 4 * 256;
  DeviceArray<unsigned> once(1, {0U});
  DeviceArray<unsigned> retry(1, {0U});
  ::cuemu::launch(4, 256)(read_then_cas, once.ptr, retry.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(retry.get()[0], n);
  EXPECT_LT(once.get()[0], n) << "no thread ran between a read and its CAS";
}

// Thread 0 of warp 1 spins until warp 0 publishes: progress needs __nanosleep / fences to be
// scheduling points (the GPU's independent thread scheduling).
__global__ void publish_then_wait(int* flag, int* data, int* seen) {
  if (threadIdx.x == 0) {
    data[0] = 42;
    __threadfence();
    atomicExch(flag, 1);
  } else if (threadIdx.x == 32) {
    while (atomicAdd(flag, 0) == 0)
      __nanosleep(100);
    __threadfence();
    seen[0] = data[0];
  }
}

TEST(CuemuRuntime, SpinWaitsMakeProgress) {
  DeviceArray<int> flag(1, {0});
  DeviceArray<int> data(1, {0});
  DeviceArray<int> seen(1, {0});
  ::cuemu::launch(1, 64)(publish_then_wait, flag.ptr, data.ptr, seen.ptr);
  EXPECT_EQ(seen.get()[0], 42);
}

__global__ void noop() {}

TEST(CuemuRuntime, BadLaunchConfigurationsAreErrors) {
  ::cuemu::launch(1, 2048)(noop);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read and reset
  ::cuemu::launch(0, 32)(noop);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

TEST(CuemuRuntime, MemoryChecksPointersDirectionsAndLimits) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64 * sizeof(int)), cudaSuccess);
  std::vector<int> h(64, 7);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 64 * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  // Host pointer where a device pointer is required, and a copy past the allocation's end.
  EXPECT_EQ(cudaMemcpy(h.data(), h.data(), 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d + 1, h.data(), 64 * sizeof(int), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(h.data(), 0, 4), cudaErrorInvalidValue);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, d + 3), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  void* huge = nullptr;
  EXPECT_EQ(cudaMalloc(&huge, std::size_t{1} << 50), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);  // not a device allocation
  cudaGetLastError();
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

__global__ void add_one(int* p, int n) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    p[i] += 1;
  }
}

TEST(CuemuRuntime, StreamsAndEventsRunInIssueOrder) {
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&stop, cudaEventDefault), cudaSuccess);
  int* d = nullptr;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&d), 1000 * sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 1000 * sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(start, a), cudaSuccess);
  ::cuemu::launch(3, 64, 0, a)(add_one, d, 1000);
  ASSERT_EQ(cudaEventRecord(stop, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, stop, 0), cudaSuccess);
  ::cuemu::launch(2, 96, 0, b)(add_one, d, 1000);
  std::vector<int> h(1000);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), d, 1000 * sizeof(int), cudaMemcpyDeviceToHost, b),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  for (int v : h)
    ASSERT_EQ(v, 2);
  float ms = -1;
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 0.0F);
  EXPECT_EQ(cudaFreeAsync(d, b), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(start), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(stop), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
  // A destroyed stream is an invalid handle from then on.
  EXPECT_EQ(cudaStreamSynchronize(a), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(a), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

TEST(CuemuRuntime, DeviceQueries) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_GE(sms, 1);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(prop.warpSize, 32);
  EXPECT_EQ(prop.multiProcessorCount, sms);
  int blocks = 0;
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &blocks, reinterpret_cast<const void*>(&noop), 256, 0),
            cudaSuccess);
  EXPECT_GE(blocks, 1);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNoDevice), "cudaErrorNoDevice");
}

struct Square {
  __host__ __device__ long long operator()(int v) const { return static_cast<long long>(v) * v; }
};

TEST(CuemuRuntime, CubShimReducesThroughFancyIterators) {
  std::vector<int> h(777);
  std::iota(h.begin(), h.end(), -300);
  DeviceArray<int> in(h.size(), h);
  DeviceArray<long long> out(4);
  auto squares = thrust::make_transform_iterator(in.ptr, Square{});
  std::size_t temp_bytes = 0;
  ASSERT_EQ(cub::DeviceReduce::Sum(nullptr, temp_bytes, squares, out.ptr, 777), cudaSuccess);
  ASSERT_GT(temp_bytes, 0U);
  DeviceArray<char> temp(temp_bytes);
  ASSERT_EQ(cub::DeviceReduce::Sum(temp.ptr, temp_bytes, squares, out.ptr, 777), cudaSuccess);
  ASSERT_EQ(cub::DeviceReduce::Min(temp.ptr, temp_bytes, squares, out.ptr + 1, 777), cudaSuccess);
  ASSERT_EQ(cub::DeviceReduce::Max(temp.ptr, temp_bytes, squares, out.ptr + 2, 777), cudaSuccess);
  ASSERT_EQ(cub::DeviceReduce::Reduce(
                temp.ptr, temp_bytes, in.ptr, out.ptr + 3, 777,
                [](long long a, long long b) { return a > b ? a : b; }, -1000LL),
            cudaSuccess);
  long long sum = 0;
  for (int v : h)
    sum += static_cast<long long>(v) * v;
  const std::vector<long long> r = out.get();
  EXPECT_EQ(r[0], sum);
  EXPECT_EQ(r[1], 0);
  EXPECT_EQ(r[2], 476LL * 476);
  EXPECT_EQ(r[3], 476);
  std::size_t small = 1;
  EXPECT_EQ(cub::DeviceReduce::Sum(temp.ptr, small, squares, out.ptr, 777), cudaErrorInvalidValue);
}

// Run by ctest with CUEMU_NO_DEVICE=1 only (cuemu_tests_no_device).
TEST(CuemuNoDevice, RuntimeReportsNoDevice) {
  const char* env = std::getenv("CUEMU_NO_DEVICE");
  ASSERT_TRUE(env != nullptr && env[0] == '1') << "run this test with CUEMU_NO_DEVICE=1";
  int count = -1;
  EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice);
  EXPECT_EQ(count, 0);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorNoDevice);
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreate(&s), cudaErrorNoDevice);
  ::cuemu::launch(1, 32)(noop);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNoDevice);
}

}  // namespace
