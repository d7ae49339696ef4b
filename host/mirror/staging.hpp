// Staging of a mirror's key changes for an index: one pass sorts the keys by digest width (the
// index takes one width per call), then one call per width present, all or nothing across
// widths. Shared by the CPU and the GPU index sinks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "prefixhit/event_mirror.hpp"

namespace prefixhit::mirror {

/// Digest widths in the order they are applied.
inline constexpr std::size_t kNumWidths = 3;
inline constexpr std::size_t kStageWidths[kNumWidths] = {32, 16, 8};

/// The keys of one width: `group` is their common group, -1 when they span several, -2 when
/// there are none.
struct WidthStage {
  std::vector<std::int32_t> groups;
  std::vector<BlockDigest> digests;
  int group = -2;
};
using WidthStages = std::array<WidthStage, kNumWidths>;

inline std::size_t width_slot(std::size_t width) {
  return width == 32 ? 0 : width == 16 ? 1 : 2;
}

/// Writes to_index_digest(key) into `out` word by word, from registers: building it in a
/// temporary (bytes zeroed one by one) and copying that out stalls store forwarding, which cost
/// most of the staging's time.
inline void write_index_digest(const EventKey& key, BlockDigest& out) {
  if (key.digest_size % 8 != 0 || key.digest_size > 32) {
    out = to_index_digest(key);
    return;
  }
  // Four scalars, not an array: an array lands on the stack and is read back in wider words.
  const std::size_t words = key.digest_size / 8U;
  auto word = [&](std::size_t k) {
    std::uint64_t v;
    std::memcpy(&v, key.bytes.data() + 8 * k, 8);
    return k < words ? v : 0;
  };
  const std::uint64_t w0 = word(0);
  const std::uint64_t w1 = word(1);
  const std::uint64_t w2 = word(2);
  const std::uint64_t w3 = word(3);
  std::memcpy(out.bytes.data(), &w0, 8);
  std::memcpy(out.bytes.data() + 8, &w1, 8);
  std::memcpy(out.bytes.data() + 16, &w2, 8);
  std::memcpy(out.bytes.data() + 24, &w3, 8);
}

/// Stages `keys` in one pass.
inline void stage_by_width(span<const EventKey> keys, WidthStages& stages) {
  for (WidthStage& s : stages) {
    s.digests.clear();
    s.groups.clear();
    s.group = -2;
  }
  for (const EventKey& key : keys) {
    WidthStage& s = stages[width_slot(key.digest_size)];
    write_index_digest(key, s.digests.emplace_back());
    s.groups.push_back(key.group_id);
    s.group = s.group == -2 || s.group == key.group_id ? key.group_id : -1;
  }
}

/// Calls apply(insert, stage, width) for each width with keys. Should one throw, the widths
/// already applied get the opposite call (the keys changed presence, so that restores them)
/// and the error goes on.
template <class Apply>
void apply_by_width(const WidthStages& stages, bool insert, const Apply& apply) {
  std::size_t done = 0;
  try {
    for (; done < kNumWidths; ++done) {
      if (stages[done].group != -2) {
        apply(insert, stages[done], kStageWidths[done]);
      }
    }
  } catch (...) {
    for (std::size_t w = 0; w < done; ++w) {
      if (stages[w].group != -2) {
        try {
          apply(!insert, stages[w], kStageWidths[w]);
        } catch (...) {  // nothing more can be done; the original error is what matters
        }
      }
    }
    throw;
  }
}

}  // namespace prefixhit::mirror
