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
#include <type_traits>
#include <utility>

#include "prefixhit/detail/finders.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/error_kind.hpp"

namespace prefixhit::detail {

inline constexpr int kWarpSize = 32;

/// Whether a Source offers `prefetch(hash_index)`: a hint, issued for every key of a probe round
/// before the first `contains`, so that the round's first loads overlap instead of waiting for
/// one another (a device-index probe is a loop of dependent loads per key).
template <class Source, class = void>
struct has_prefetch : std::false_type {};
template <class Source>
struct has_prefetch<Source,
                    std::void_t<decltype(std::declval<const Source&>().prefetch(std::int64_t{}))>>
    : std::true_type {};

/// Lane `lane`'s keys of a probe round: the round covers `windows` consecutive windows of
/// MaxWindow keys of spec group `sg`, the first one `count` keys long, starting at hash index
/// `first` (key k of the round is hash index first + k*step). The lane probes keys
/// lane + 32*j, j < windows * MaxWindow/32, and returns bit j set iff its key j is held by every
/// member group. `n` bounds the speculative windows (1..windows-1): their keys outside the hash
/// list are never probed (the finders will not ask for them). Keys of the first window are
/// probed as asked: the finders guarantee they are inside the list.
template <int MaxWindow, int MaxRoundWindows, class Source>
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t lane_round_bits(
    const LookupPlan& plan, const Source& source, int sg, std::int64_t first, std::int64_t step,
    int count, int windows, std::int64_t n, int lane) {
  constexpr int kKeysPerLane = MaxWindow / kWarpSize;
  const SpecGroupPlan& spec = plan.spec_groups[sg];
  auto probed = [&](int w, int j, std::int64_t& index) {
    const int k = lane + kWarpSize * j;
    const int limit = w == 0 ? count : (w < windows ? MaxWindow : 0);
    index = first + static_cast<std::int64_t>(w * MaxWindow + k) * step;
    return k < limit && (w == 0 || (index >= 0 && index < n));
  };
  if constexpr (has_prefetch<Source>::value) {
#if PREFIXHIT_DEVICE_CODE
#pragma unroll
#endif
    for (int w = 0; w < MaxRoundWindows; ++w) {
#if PREFIXHIT_DEVICE_CODE
#pragma unroll
#endif
      for (int j = 0; j < kKeysPerLane; ++j) {
        std::int64_t index = 0;
        if (probed(w, j, index)) {
          source.prefetch(index);
        }
      }
    }
  }
  std::uint32_t bits = 0;
  // Fully unrolled over the round's keys, so that independent loads (a presence table's bytes)
  // are all in flight at once rather than one round trip after another.
#if PREFIXHIT_DEVICE_CODE
#pragma unroll
#endif
  for (int w = 0; w < MaxRoundWindows; ++w) {
#if PREFIXHIT_DEVICE_CODE
#pragma unroll
#endif
    for (int j = 0; j < kKeysPerLane; ++j) {
      std::int64_t index = 0;
      if (probed(w, j, index)) {
        // No short circuit: the members' probes are independent loads that can be in flight
        // together, which matters more on the device than skipping the rare second probe.
        bool present = true;
        for (int m = 0; m < spec.num_members; ++m) {
          present = source.contains(plan.members[spec.first_member + m], index) && present;
        }
        bits |= static_cast<std::uint32_t>(present) << (w * kKeysPerLane + j);
      }
    }
  }
  return bits;
}

/// A Probe (see finders.hpp) that answers windows warp-wide.
///
/// Windows start at kFirstWindow bits (or at the blocks a sliding-window or Mamba scan reads
/// on a full store, which the finder hints) and double up to kMaxWindow (32 or 64): a lane
/// probes one key per 32 bits of window, so a 64-bit window costs one round trip for two keys
/// per lane. The first window of a backward window scan (which usually stops after a few
/// blocks) stays at one key per lane.
///
/// Lookahead: once the finder asks for full kMaxWindow windows (a long walk, such as full
/// attention over a long prompt), each probe round also answers the next Lookahead windows of
/// the same walk (same spec group and step, consecutive) and keeps their bits; the walk's next
/// refills are then answered from those bits without another round trip. A window asked for
/// that does not continue the walk simply starts a new round. The bits are the same either way:
/// only the number of dependent round trips changes (a 512-block walk: 3 rounds instead of 9).
template <class Source, int FirstWindow = 32, int MaxWindow = 64, int Lookahead = 0>
struct WarpProbe {
  static_assert(MaxWindow == 32 || MaxWindow == 64, "a window is one or two keys per lane");
  static_assert(FirstWindow > 0 && FirstWindow <= MaxWindow, "bad first window");
  static_assert(Lookahead >= 0 && (1 + Lookahead) * MaxWindow <= 32 * kWarpSize,
                "a lane keeps at most 32 bits per round");
  static constexpr int kFirstWindow = FirstWindow;
  static constexpr int kMaxWindow = MaxWindow;
  static constexpr int kKeysPerLane = MaxWindow / kWarpSize;
  static constexpr int kMaxRoundWindows = 1 + Lookahead;

  const LookupPlan* plan;
  Source source;
  std::int64_t n;  ///< the request's number of hashes (bounds the lookahead)

  // The lookahead windows of the last round (identical in every lane).
  mutable int ahead_sg_ = -1;
  mutable int ahead_left_ = 0;
  mutable int ahead_next_ = 0;
  mutable std::int64_t ahead_first_ = 0;
  mutable std::int64_t ahead_step_ = 0;
  // NOLINTNEXTLINE(bugprone-branch-clone): both arms are 1 only when Lookahead is 1.
  mutable std::uint64_t ahead_bits_[Lookahead > 0 ? Lookahead : 1] = {};

  PREFIXHIT_HD std::uint64_t window(int sg, std::int64_t first, std::int64_t step,
                                    int count) const {
    if (Lookahead > 0 && ahead_left_ > 0 && sg == ahead_sg_ && step == ahead_step_ &&
        first == ahead_first_) {
      const std::uint64_t bits = ahead_bits_[ahead_next_];
      ++ahead_next_;
      --ahead_left_;
      ahead_first_ += static_cast<std::int64_t>(MaxWindow) * step;
      return count >= 64 ? bits : bits & ((std::uint64_t{1} << count) - 1);
    }
    const int windows = (Lookahead > 0 && count == MaxWindow) ? kMaxRoundWindows : 1;
    std::uint64_t round[kMaxRoundWindows] = {};
#if PREFIXHIT_DEVICE_CODE
    // `count` and `windows` are warp-uniform (every lane runs the same finder on the same
    // bits), so every lane reaches each ballot and the full mask is exact.
    const int lane = static_cast<int>(threadIdx.x) & (kWarpSize - 1);
    const std::uint32_t mine = lane_round_bits<MaxWindow, kMaxRoundWindows>(
        *plan, source, sg, first, step, count, windows, n, lane);
#pragma unroll
    for (int w = 0; w < kMaxRoundWindows; ++w) {
      if (w < windows) {
#pragma unroll
        for (int j = 0; j < kKeysPerLane; ++j) {
          const std::uint32_t ballot =
              __ballot_sync(0xffffffffU, ((mine >> (w * kKeysPerLane + j)) & 1U) != 0);
          round[w] |= static_cast<std::uint64_t>(ballot) << (kWarpSize * j);
        }
      }
    }
#else
    for (int lane = 0; lane < kWarpSize; ++lane) {
      const std::uint32_t mine = lane_round_bits<MaxWindow, kMaxRoundWindows>(
          *plan, source, sg, first, step, count, windows, n, lane);
      for (int w = 0; w < windows; ++w) {
        for (int j = 0; j < kKeysPerLane; ++j) {
          if (((mine >> (w * kKeysPerLane + j)) & 1U) != 0) {
            round[w] |= std::uint64_t{1} << (lane + kWarpSize * j);
          }
        }
      }
    }
#endif
    if (Lookahead > 0) {
      ahead_sg_ = sg;
      ahead_step_ = step;
      ahead_first_ = first + static_cast<std::int64_t>(MaxWindow) * step;
      ahead_left_ = windows - 1;
      ahead_next_ = 0;
      for (int w = 1; w < windows; ++w) {
        ahead_bits_[w - 1] = round[w];
      }
    }
    return round[0];
  }
};

/// Lookahead windows per probe round of the kernels, by existence source. A presence-table
/// probe is one independent byte load, so a round of four windows costs about one round trip
/// and a long walk needs a quarter of the rounds. A device-index probe is a chain of dependent
/// loads (digest, bucket header, slot digest) inside the index's own loop; a lane's probes do not
/// overlap, so lookahead would only add probes past the end of a walk.
inline constexpr int kPresenceLookahead = 3;
inline constexpr int kIndexLookahead = 0;

/// The probe configuration the CUDA kernels use (32-key first windows, then 64-key windows);
/// the CPU twin tests and the benchmarks' key counts use the same ones.
template <class Source, int Lookahead>
using KernelWarpProbe = WarpProbe<Source, 32, 64, Lookahead>;

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
