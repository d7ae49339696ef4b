// cuemu's warp collectives and block barriers against their CUDA definitions, lane by lane.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "test_util.hpp"

namespace {

using cuemu_test::DeviceArray;

constexpr unsigned kFull = 0xffffffffU;

__global__ void votes(unsigned* out) {
  const unsigned lane = threadIdx.x & 31U;
  const int odd = static_cast<int>(lane & 1U);
  out[lane * 6 + 0] = __ballot_sync(kFull, odd);
  out[lane * 6 + 1] = static_cast<unsigned>(__any_sync(kFull, lane == 7));
  out[lane * 6 + 2] = static_cast<unsigned>(__all_sync(kFull, lane < 31));
  out[lane * 6 + 3] = __activemask();
  out[lane * 6 + 5] = __match_any_sync(kFull, lane % 3);
  // A partial mask: only the even lanes take part (last: cuemu reports a lane that meets a
  // different collective while a pending one names it, stricter than the hardware).
  if ((lane & 1U) == 0) {
    out[lane * 6 + 4] = __ballot_sync(0x55555555U, lane < 8);
    __syncwarp(0x55555555U);
  } else {
    out[lane * 6 + 4] = 0;
  }
}

TEST(CuemuCollectives, BallotAnyAllActiveMatch) {
  DeviceArray<unsigned> out(32 * 6);
  ::cuemu::launch(1, 32)(votes, out.ptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<unsigned> r = out.get();
  for (unsigned lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(r[lane * 6 + 0], 0xaaaaaaaaU) << lane;
    EXPECT_EQ(r[lane * 6 + 1], 1U) << lane;
    EXPECT_EQ(r[lane * 6 + 2], 0U) << lane;
    EXPECT_EQ(r[lane * 6 + 3], kFull) << lane;
    EXPECT_EQ(r[lane * 6 + 4], (lane & 1U) == 0 ? 0x55U : 0U) << lane;
    unsigned same = 0;
    for (unsigned k = 0; k < 32; ++k)
      same |= (k % 3 == lane % 3 ? 1U : 0U) << k;
    EXPECT_EQ(r[lane * 6 + 5], same) << lane;
  }
}

__global__ void shuffles(std::uint64_t* out) {
  const int lane = static_cast<int>(threadIdx.x & 31U);
  const std::uint64_t v = (std::uint64_t{1} << 40) + static_cast<std::uint64_t>(lane);
  out[lane * 5 + 0] = __shfl_sync(kFull, v, 5);
  out[lane * 5 + 1] = __shfl_up_sync(kFull, v, 3);
  out[lane * 5 + 2] = __shfl_down_sync(kFull, v, 3);
  out[lane * 5 + 3] = __shfl_xor_sync(kFull, v, 1);
  out[lane * 5 + 4] = __shfl_down_sync(kFull, v, 2, 16);  // segments of 16 lanes
}

TEST(CuemuCollectives, ShufflesKeep64BitValuesAndSegments) {
  DeviceArray<std::uint64_t> out(32 * 5);
  ::cuemu::launch(1, 32)(shuffles, out.ptr);
  const std::vector<std::uint64_t> r = out.get();
  const std::uint64_t base = std::uint64_t{1} << 40;
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(r[lane * 5 + 0], base + 5);
    EXPECT_EQ(r[lane * 5 + 1], base + static_cast<std::uint64_t>(lane >= 3 ? lane - 3 : lane));
    EXPECT_EQ(r[lane * 5 + 2], base + static_cast<std::uint64_t>(lane + 3 < 32 ? lane + 3 : lane));
    EXPECT_EQ(r[lane * 5 + 3], base + static_cast<std::uint64_t>(lane ^ 1));
    const int seg_end = (lane & ~15) + 16;
    EXPECT_EQ(r[lane * 5 + 4],
              base + static_cast<std::uint64_t>(lane + 2 < seg_end ? lane + 2 : lane));
  }
}

__global__ void reductions(int* out) {
  const int lane = static_cast<int>(threadIdx.x & 31U);
  const int v = lane % 2 == 0 ? -lane : lane;
  const auto u = static_cast<unsigned>(lane + 1);
  out[lane * 8 + 0] = __reduce_add_sync(kFull, v);
  out[lane * 8 + 1] = __reduce_min_sync(kFull, v);
  out[lane * 8 + 2] = __reduce_max_sync(kFull, v);
  out[lane * 8 + 3] = static_cast<int>(__reduce_min_sync(kFull, u));
  out[lane * 8 + 4] = static_cast<int>(__reduce_max_sync(kFull, u));
  out[lane * 8 + 5] = static_cast<int>(__reduce_and_sync(kFull, u | 0x100U));
  out[lane * 8 + 6] = static_cast<int>(__reduce_or_sync(kFull, u));
  out[lane * 8 + 7] = static_cast<int>(__reduce_xor_sync(kFull, u));
}

TEST(CuemuCollectives, ReductionsSignedAndUnsigned) {
  DeviceArray<int> out(32 * 8);
  ::cuemu::launch(1, 32)(reductions, out.ptr);
  const std::vector<int> r = out.get();
  int add = 0;
  int mn = 1 << 30;
  int mx = -(1 << 30);
  unsigned o = 0;
  unsigned x = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int v = lane % 2 == 0 ? -lane : lane;
    add += v;
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
    o |= static_cast<unsigned>(lane + 1);
    x ^= static_cast<unsigned>(lane + 1);
  }
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(r[lane * 8 + 0], add);
    EXPECT_EQ(r[lane * 8 + 1], mn);
    EXPECT_EQ(r[lane * 8 + 2], mx);
    EXPECT_EQ(r[lane * 8 + 3], 1);
    EXPECT_EQ(r[lane * 8 + 4], 32);
    EXPECT_EQ(r[lane * 8 + 5], 0x100);
    EXPECT_EQ(r[lane * 8 + 6], static_cast<int>(o));
    EXPECT_EQ(r[lane * 8 + 7], static_cast<int>(x));
  }
}

__global__ void barriers(const int* in, int* out) {
  const int t = static_cast<int>(threadIdx.x);
  const int p = in[t];
  out[t * 3 + 0] = __syncthreads_count(p);
  out[t * 3 + 1] = __syncthreads_and(p);
  out[t * 3 + 2] = __syncthreads_or(t == 40 && p != 0);
}

TEST(CuemuCollectives, BlockBarriersCountAcrossWarps) {
  std::vector<int> in(96);
  int ones = 0;
  for (int i = 0; i < 96; ++i) {
    in[static_cast<std::size_t>(i)] = i % 5 == 0 ? 1 : 0;
    ones += in[static_cast<std::size_t>(i)];
  }
  DeviceArray<int> d_in(96, in);
  DeviceArray<int> out(96 * 3);
  ::cuemu::launch(1, 96)(barriers, d_in.ptr, out.ptr);
  const std::vector<int> r = out.get();
  for (int t = 0; t < 96; ++t) {
    EXPECT_EQ(r[static_cast<std::size_t>(t) * 3 + 0], ones);
    EXPECT_EQ(r[static_cast<std::size_t>(t) * 3 + 1], 0);
    EXPECT_EQ(r[static_cast<std::size_t>(t) * 3 + 2], 1);
  }
}

// A partial last warp (40 threads: lanes 8..31 of warp 1 do not exist) and a 2-D block.
__global__ void shapes(unsigned* out) {
  const unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  const unsigned warp = t / 32U;
  const unsigned mask = warp == 0 ? kFull : 0xffU;
  out[t] = __ballot_sync(mask, 1) | (blockIdx.x << 16);
}

TEST(CuemuCollectives, PartialLastWarpAndTwoDimensionalBlocks) {
  DeviceArray<unsigned> out(40);
  ::cuemu::launch(1, dim3(8, 5))(shapes, out.ptr);
  const std::vector<unsigned> r = out.get();
  for (unsigned t = 0; t < 40; ++t)
    EXPECT_EQ(r[t], t < 32 ? kFull : 0xffU) << t;
}

}  // namespace
