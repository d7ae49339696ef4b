// Store and lookup masks (SEMANTICS.md 7, 11.7): which chunks of each group a save writes and a
// lookup may read.
#include <algorithm>
#include <cstring>
#include <string>

#include "host/checks.hpp"
#include "host/nvtx.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

using detail::ceil_div;
using detail::floor_div;
using detail::floor_mod;

namespace {

bool is_window_kind(GroupKind kind) {
  return kind == GroupKind::sliding_window || kind == GroupKind::sliding_window_mla;
}

/// Writes keep[k] for chunk first+k, k < len: chunk i is kept iff i >= shift and
/// (i - shift) mod per >= per - need. Fills one period, then copies it forward.
void fill_periodic(std::uint8_t* out, std::int64_t first, std::int64_t len, std::int64_t shift,
                   std::int64_t per, std::int64_t need) {
  std::int64_t k = 0;
  while (k < len && first + k < shift) {
    out[k++] = 0;
  }
  if (k >= len) {
    return;
  }
  const std::int64_t period_start = k;
  std::int64_t r = floor_mod(first + k - shift, per);
  const std::int64_t period_end = std::min(len, k + per);
  for (; k < period_end; ++k) {
    out[k] = r >= per - need ? 1 : 0;
    if (++r == per) {
      r = 0;
    }
  }
  while (k < len) {
    const std::int64_t n = std::min(k - period_start, len - k);
    std::memcpy(out + k, out + period_start, static_cast<std::size_t>(n));
    k += n;
  }
}

void keep_range(ChunkMask& mask, std::int64_t from, std::int64_t to) {
  from = std::max(from, mask.first_chunk);
  to = std::min(to, mask.end_chunk);
  for (std::int64_t i = from; i < to; ++i) {
    (*mask.keep)[static_cast<std::size_t>(i - mask.first_chunk)] = 1;
  }
}

}  // namespace

std::vector<ChunkMask> Coordinator::masks(std::int64_t aligned_len, std::int64_t start_token,
                                          std::optional<std::int64_t> num_prompt_tokens,
                                          std::optional<std::int64_t> retention, bool store) const {
  const std::int64_t a_len = plan_.alignment;
  if (aligned_len < 0) {
    throw InvalidArgument("aligned_token_len must not be negative, got " +
                          std::to_string(aligned_len));
  }
  if (start_token < 0) {
    throw InvalidArgument("start_token must not be negative, got " + std::to_string(start_token));
  }
  // 0.33's reference takes any prompt length, -1 included (floored boundaries); pr49069 keeps
  // its non-negative rule. Absurd magnitudes are refused (overflow-free boundary arithmetic).
  const std::int64_t min_prompt =
      config_.semantics == Semantics::vllm_0_33 ? -detail::kMaxConfigTokens : 0;
  if (num_prompt_tokens && *num_prompt_tokens < min_prompt) {
    throw InvalidArgument("num_prompt_tokens must be at least " + std::to_string(min_prompt) +
                          ", got " + std::to_string(*num_prompt_tokens));
  }
  if (aligned_len % a_len != 0) {
    throw UnalignedLength("aligned_token_len " + std::to_string(aligned_len) +
                          " is not a multiple of the lookup alignment " + std::to_string(a_len));
  }
  // One byte per chunk is allocated below: refuse absurd lengths instead of allocating them.
  for (const GroupSpec& spec : config_.groups) {
    if (aligned_len / spec.block_size > detail::kMaxMaskChunks) {
      throw InvalidArgument("aligned_token_len " + std::to_string(aligned_len) + " spans " +
                            std::to_string(aligned_len / spec.block_size) +
                            " chunks of block_size " + std::to_string(spec.block_size) +
                            "; a mask holds at most " + std::to_string(detail::kMaxMaskChunks));
    }
  }
  const std::int64_t s = plan_.scheduler_block_size;
  const bool v033 = config_.semantics == Semantics::vllm_0_33;
  // Replay boundaries, aligned down to S (floored: num_prompt_tokens 0 gives -S). 0.33 with an
  // EAGLE group uses two (SEMANTICS.md 11.7); they may coincide.
  std::int64_t boundaries[2] = {0, 0};
  int num_boundaries = 0;
  if (num_prompt_tokens) {
    const std::int64_t p = *num_prompt_tokens;
    if (v033 && !eagle_group_ids_.empty()) {
      const std::int64_t b1 = std::max<std::int64_t>(floor_div(p - 1, s) * s - s, 0);
      const std::int64_t b2 = std::max<std::int64_t>(floor_div(p, s) * s - s, 0);
      boundaries[num_boundaries++] = floor_div(b1, s) * s;
      if (b2 != b1) {
        boundaries[num_boundaries++] = floor_div(b2, s) * s;
      }
    } else {
      boundaries[num_boundaries++] = floor_div(p - 1, s) * s;
    }
  }

  std::vector<ChunkMask> out(config_.groups.size());
  for (std::size_t g = 0; g < config_.groups.size(); ++g) {
    const GroupSpec& spec = config_.groups[g];
    const std::int64_t b = spec.block_size;
    ChunkMask& mask = out[g];
    mask.end_chunk = floor_div(aligned_len, b);
    mask.first_chunk =
        std::min(mask.end_chunk, std::max<std::int64_t>(0, ceil_div(start_token, b)));
    const auto len = static_cast<std::size_t>(mask.end_chunk - mask.first_chunk);
    if (is_window_kind(spec.kind)) {
      if (s % b != 0) {
        continue;  // only a non-cacheable window group can get here: every chunk
      }
      const std::int64_t e = is_eagle_group_[g];
      const std::int64_t need = ceil_div(spec.coverage_window() - 1, b) + e;
      if (!retention || *retention != 0) {
        const std::int64_t per = floor_div(retention ? *retention : s, b);
        if (need >= per) {
          continue;  // every chunk
        }
        mask.keep.emplace(len);
        fill_periodic(mask.keep->data(), mask.first_chunk, static_cast<std::int64_t>(len), e, per,
                      need);
      } else {
        mask.keep.emplace(len, 0);
      }
      if (retention) {
        for (int i = 0; i < num_boundaries; ++i) {
          const std::int64_t edge = boundaries[i] / b + e;
          keep_range(mask, edge - need, edge);
        }
      }
    } else if (spec.kind == GroupKind::mamba) {
      if (v033 && store) {
        mask.keep.emplace(len, 0);  // 0.33 never saves Mamba state through store_mask (11.7)
        continue;
      }
      if (!retention) {
        continue;
      }
      if (*retention != 0) {
        const std::int64_t per = floor_div(*retention, b);
        if (per <= 1) {
          continue;
        }
        mask.keep.emplace(len);
        fill_periodic(mask.keep->data(), mask.first_chunk, static_cast<std::int64_t>(len), 0, per,
                      1);
      } else {
        mask.keep.emplace(len, 0);
      }
      if (num_boundaries > 0) {
        const std::int64_t chunk = boundaries[0] / b - 1;
        keep_range(mask, chunk, chunk + 1);
      }
    }
    // Full attention, MLA, chunked local and circular buffers: always every chunk.
  }
  return out;
}

std::vector<ChunkMask> Coordinator::store_mask(
    std::int64_t aligned_token_len, std::int64_t start_token,
    std::optional<std::int64_t> num_prompt_tokens) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::store_mask");
  return masks(aligned_token_len, start_token, num_prompt_tokens, config_.retention_interval, true);
}

std::vector<ChunkMask> Coordinator::lookup_mask(std::int64_t aligned_token_len) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::lookup_mask");
  return masks(aligned_token_len, 0, std::nullopt, std::nullopt, false);
}

}  // namespace prefixhit
