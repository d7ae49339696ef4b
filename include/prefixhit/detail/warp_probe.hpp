// The warp probe of the GPU batch lookup and its portable twin.
//
// On the device one warp answers one request: all 32 lanes run the shared finders
// (finders.hpp) redundantly and convergently, and when a finder asks for a window of existence
// bits, lane k probes the keys k and k+32 of the window and the warp combines the answers with
// __ballot_sync, so every lane holds the same bits and takes the same branches afterwards.
//
// On the host the same lane logic runs lane by lane (lane 0, 1, ..., 31) and the bits are
// combined in a loop: the portable twin. The CPU tests run the twin against the CPU engine, so
// the windows, the lane-to-key mapping, the member AND and the output writes the kernel uses are
// all exercised without a GPU.
#pragma once

#include <cstdint>

#include "prefixhit/detail/finders.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/error_kind.hpp"

namespace prefixhit::detail {

inline constexpr int kWarpSize = 32;

/// Lane `lane`'s part of a window of spec group `sg`: bit j is set iff key lane + 32*j of the
/// window (hash index first + (lane + 32*j)*step) is held by every member group.
/// `Source::contains(group_id, hash_index)` answers one key for the current request.
template <int KeysPerLane, class Source>
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t lane_window_bits(const LookupPlan& plan,
                                                                  const Source& source, int sg,
                                                                  std::int64_t first,
                                                                  std::int64_t step, int count,
                                                                  int lane) {
  const SpecGroupPlan& spec = plan.spec_groups[sg];
  std::uint32_t bits = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < KeysPerLane; ++j) {
    const int k = lane + kWarpSize * j;
    if (k < count) {
      const std::int64_t index = first + static_cast<std::int64_t>(k) * step;
      // No short circuit: the members' probes are independent loads that can be in flight
      // together, which matters more on the device than skipping the rare second probe.
      bool present = true;
      for (int m = 0; m < spec.num_members; ++m) {
        present &= source.contains(plan.members[spec.first_member + m], index);
      }
      bits |= static_cast<std::uint32_t>(present) << j;
    }
  }
  return bits;
}

/// A Probe (see finders.hpp) that answers windows warp-wide. Windows start at kFirstWindow bits
/// and double up to kMaxWindow (32 or 64): a lane probes one key per 32 bits of window, so a
/// 64-bit window costs one round trip for two keys per lane and halves the dependent rounds of
/// a long full-attention walk, while the first window of a backward window scan (which usually
/// stops after a few blocks) stays at one key per lane.
template <class Source, int FirstWindow = 32, int MaxWindow = 64>
struct WarpProbe {
  static_assert(MaxWindow == 32 || MaxWindow == 64, "a window is one or two keys per lane");
  static_assert(FirstWindow > 0 && FirstWindow <= MaxWindow, "bad first window");
  static constexpr int kFirstWindow = FirstWindow;
  static constexpr int kMaxWindow = MaxWindow;
  static constexpr int kKeysPerLane = MaxWindow / kWarpSize;

  const LookupPlan* plan;
  Source source;

  PREFIXHIT_HD std::uint64_t window(int sg, std::int64_t first, std::int64_t step,
                                    int count) const {
#if defined(__CUDA_ARCH__)
    // `count` is warp-uniform (every lane runs the same finder on the same bits), so every lane
    // reaches each ballot and the full mask is exact.
    const int lane = static_cast<int>(threadIdx.x) & (kWarpSize - 1);
    const std::uint32_t mine =
        lane_window_bits<kKeysPerLane>(*plan, source, sg, first, step, count, lane);
    std::uint64_t bits = __ballot_sync(0xffffffffU, (mine & 1U) != 0);
    if (kKeysPerLane > 1 && count > kWarpSize) {
      bits |= static_cast<std::uint64_t>(__ballot_sync(0xffffffffU, (mine & 2U) != 0)) << 32;
    }
    return bits;
#else
    std::uint64_t bits = 0;
    for (int lane = 0; lane < kWarpSize; ++lane) {
      const std::uint32_t mine =
          lane_window_bits<kKeysPerLane>(*plan, source, sg, first, step, count, lane);
      for (int j = 0; j < kKeysPerLane; ++j) {
        if (((mine >> j) & 1U) != 0) {
          bits |= std::uint64_t{1} << (lane + kWarpSize * j);
        }
      }
    }
    return bits;
#endif
  }
};

/// Existence from a caller's presence table: one byte per (group id, hash index) of the
/// request, `row[g*n + i]` nonzero when (g, hashes[i]) is in the store (gpu.hpp).
struct PresenceTableSource {
  const std::uint8_t* row;  ///< the request's block: table + G*offsets[r]
  std::int64_t n;           ///< the request's number of hashes

  PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool contains(int group_id, std::int64_t index) const {
    // The finders only ask for indices inside the hash list; the check keeps a malformed batch
    // from reading another request's block.
    return index >= 0 && index < n && row[group_id * n + index] != 0;
  }
};

/// Where one request's results go: row r of the batch outputs (gpu.hpp's layout).
struct RequestOutputs {
  std::int64_t* hit_lengths;
  std::int64_t* num_blocks;
  std::int64_t* num_placeholders;
  ErrorKind* status;
};

/// One request of a batch: the coordinator lookup over `probe`, then row r of the outputs.
/// Lane `lane` of `lanes` writes the groups lane, lane+lanes, ... (coalesced on the device;
/// lane 0 of 1 on the host). A failed request gets its error in status and zeros elsewhere, the
/// "no partial result" rule of SEMANTICS.md 9.3.
template <class Probe>
PREFIXHIT_HD ErrorKind lookup_request(const LookupPlan& plan, std::int64_t n,
                                      std::int64_t max_length, bool apply_eagle, const Probe& probe,
                                      std::int64_t r, int lane, int lanes,
                                      const RequestOutputs& out) {
  GroupHit hits[kMaxGroups];
  std::int64_t hit_length = 0;
  const ErrorKind err =
      find_longest_cache_hit(plan, n, max_length, apply_eagle, probe, hits, hit_length);
  const bool ok = err == ErrorKind::ok;
  if (lane == 0) {
    out.hit_lengths[r] = ok ? hit_length : 0;
    out.status[r] = err;
  }
  const std::int64_t row = r * plan.num_groups;
  for (int g = lane; g < plan.num_groups; g += lanes) {
    const GroupHit& hit = hits[plan.spec_group_of[g]];
    out.num_blocks[row + g] = ok ? hit.num_blocks : 0;
    out.num_placeholders[row + g] = ok ? hit.num_placeholders : 0;
  }
  return err;
}

}  // namespace prefixhit::detail
