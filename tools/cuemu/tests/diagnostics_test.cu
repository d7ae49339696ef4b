// The bugs cuemu reports instead of computing garbage: each kernel here is wrong in a way a GPU
// usually lets pass (undefined behaviour), and the death test checks the message names it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "test_util.hpp"

namespace {

using cuemu_test::DeviceArray;

constexpr unsigned kFull = 0xffffffffU;

// A grid-stride loop whose last round is partial, with a full-mask ballot inside: the lanes past
// n have left the loop (and the kernel) while the others wait for them.
__global__ void partial_round(const int* in, int n, unsigned* out) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    const unsigned b = __ballot_sync(kFull, in[i] > 0);
    if ((threadIdx.x & 31U) == 0)
      atomicAdd(out, static_cast<unsigned>(__popc(b)));
  }
}

// A full-mask ballot inside a lane-divergent branch; the other lanes meet a different one.
__global__ void divergent(const int* in, unsigned* out) {
  if (in[threadIdx.x] > 0) {
    out[threadIdx.x] = __ballot_sync(kFull, 1);
  } else {
    out[threadIdx.x] = static_cast<unsigned>(__any_sync(kFull, 1));
  }
}

__global__ void mask_without_caller(unsigned* out) {
  out[threadIdx.x] = __ballot_sync(0x1U, 1);  // lanes 1..31 are not in their own mask
}

__global__ void shuffle_outside_mask(int* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_sync(0xffffU, 1, 20);
}

// Lane 0 waits for lane 1 in __syncwarp while lane 1 waits for lane 0 in __syncthreads.
__global__ void barrier_deadlock() {
  if (threadIdx.x == 0) {
    __syncwarp(0x3U);
  } else {
    __syncthreads();
  }
}

__global__ void misaligned_load(const std::uint64_t* p, std::uint64_t* out) {
  *out = __ldg(p);
}

__global__ void traps() {
  __trap();
}

struct Inputs {
  DeviceArray<int> in{64};
  DeviceArray<unsigned> out{64};
  Inputs() {
    std::vector<int> h(64);
    for (int i = 0; i < 64; ++i)
      h[static_cast<std::size_t>(i)] = i % 3 - 1;
    cudaMemcpy(in.ptr, h.data(), sizeof(int) * 64, cudaMemcpyHostToDevice);
  }
};

// Which side cuemu catches depends on the order it runs the lanes in: under round robin a lane
// exits while the others wait in the ballot; under a random schedule (CUEMU_SCHEDULE=random:N) a
// lane may reach the ballot after lanes of its mask exited. Both name the same bug.
TEST(CuemuDiagnosticsDeathTest, LaneExitsWhileItsWarpWaits) {
  EXPECT_DEATH(
      {
        Inputs x;
        ::cuemu::launch(1, 64).named("partial_round")(partial_round, x.in.ptr, 40, x.out.ptr);
      },
      "in partial_round: block \\(0,0,0\\) thread \\([0-9]+,0,0\\) \\[warp 1 lane [0-9]+\\] "
      "(exited while lanes 0x[0-9a-f]+ of its warp wait for it in __ballot_sync\\(mask "
      "0xffffffff\\)|calls __ballot_sync with mask 0xffffffff naming lanes 0x[0-9a-f]+ that "
      "already exited)");
}

TEST(CuemuDiagnosticsDeathTest, DivergentCollectives) {
  EXPECT_DEATH(
      {
        Inputs x;
        ::cuemu::launch(1, 32)(divergent, x.in.ptr, x.out.ptr);
      },
      "divergent warp collectives: .* calls __(any|ballot)_sync\\(mask 0xffffffff\\) while lanes "
      "0x[0-9a-f]+ wait in __(ballot|any)_sync");
}

TEST(CuemuDiagnosticsDeathTest, MaskMustNameTheCallingLane) {
  EXPECT_DEATH(
      {
        Inputs x;
        ::cuemu::launch(1, 32)(mask_without_caller, x.out.ptr);
      },
      "calls __ballot_sync with mask 0x00000001, which does not name the calling lane");
}

TEST(CuemuDiagnosticsDeathTest, ShuffleFromALaneOutsideTheMask) {
  EXPECT_DEATH(
      {
        Inputs x;
        ::cuemu::launch(1, 32)(shuffle_outside_mask, x.in.ptr);
      },
      "reads lane 20 in __shfl_sync\\(mask 0x0000ffff\\), which is not in the mask");
}

TEST(CuemuDiagnosticsDeathTest, DeadlockNamesTheWaiters) {
  EXPECT_DEATH(::cuemu::launch(1, 2).named("barrier_deadlock")(barrier_deadlock),
               "deadlock in barrier_deadlock: no CUDA thread can proceed; first waiters:\n"
               ".*lane 0\\] waits in __syncwarp\n.*lane 1\\] waits in __syncthreads");
}

TEST(CuemuDiagnosticsDeathTest, TrapNamesTheThread) {
  EXPECT_DEATH(::cuemu::launch(1, 1).named("traps")(traps),
               "__trap\\(\\) in traps by block \\(0,0,0\\) thread \\(0,0,0\\)");
}

TEST(CuemuDiagnosticsDeathTest, MisalignedHintedLoad) {
  EXPECT_DEATH(
      {
        DeviceArray<std::uint64_t> buf(4);
        const auto* p =
            reinterpret_cast<const std::uint64_t*>(reinterpret_cast<const char*>(buf.ptr) + 4);
        ::cuemu::launch(1, 1)(misaligned_load, p, buf.ptr);
      },
      "misaligned address in __ldg");
}

}  // namespace
