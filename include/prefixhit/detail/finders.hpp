// The per-kind longest-hit finders and the coordinator's fixed point (SEMANTICS.md 4 and 5),
// written once for host and device.
//
// A finder sees the store only through a Probe, walked by an ExistenceCursor
// (detail/existence_cursor.hpp).
#pragma once

#include <cstdint>

#include "prefixhit/detail/existence_cursor.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/error_kind.hpp"

namespace prefixhit::detail {

/// Removes the last block of a lookup list (placeholders first, then loaded blocks stay a prefix).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE void pop_block(GroupHit& hit) {
  --hit.num_blocks;
  hit.num_placeholders = min64(hit.num_placeholders, hit.num_blocks);
}

/// Keeps only the first `blocks` entries of a lookup list.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE void truncate_blocks(GroupHit& hit, std::int64_t blocks) {
  hit.num_blocks = min64(hit.num_blocks, blocks);
  hit.num_placeholders = min64(hit.num_placeholders, hit.num_blocks);
}

/// How many blocks a scan from block total-1 down passes over before the first block whose
/// streak may end on the alignment `a`: block i may start one iff (i + edge_offset) * b is a
/// multiple of a, that is iff i + edge_offset is a multiple of a / gcd(a, b) (every block when b
/// is a multiple of a). At most total, and at most 64 (a cursor window's most).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t unaligned_top_blocks(std::int64_t total,
                                                                     std::int64_t b, std::int64_t a,
                                                                     std::int64_t edge_offset) {
  const bool powers_of_two = is_pow2(a) && is_pow2(b);
  std::int64_t x = powers_of_two ? min64(a, b) : a;  // gcd(a, b): the smaller of two powers of two
  std::int64_t y = powers_of_two ? 0 : b;
  while (y != 0) {  // else by Euclid's steps
    const std::int64_t r = x % y;
    x = y;
    y = r;
  }
  return min64(min64(floor_mod(total - 1 + edge_offset, floor_div(a, x)), total), 64);
}

/// Blocks the full-attention walk of spec group `sg` may read under bound `max_len`.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t full_attention_max_blocks(const LookupPlan& plan,
                                                                          int sg, std::int64_t n,
                                                                          std::int64_t max_len) {
  const std::int64_t b = plan.spec_groups[sg].block_size;
  return min64(floor_div(max_len, b), floor_div(n, floor_div(b, plan.hash_block_size)));
}

/// Full attention and MLA (SEMANTICS.md 4.1). Returns the hit length in tokens.
template <class Probe>
PREFIXHIT_HD std::int64_t find_full_attention(const LookupPlan& plan, int sg, std::int64_t n,
                                              std::int64_t max_len, bool drop, const Probe& probe,
                                              GroupHit& out) {
  const std::int64_t b = plan.spec_groups[sg].block_size;
  const std::int64_t a = plan.alignment;
  const std::int64_t h = plan.hash_block_size;
  const std::int64_t s = floor_div(b, h);
  const std::int64_t max_blocks = full_attention_max_blocks(plan, sg, n, max_len);
  std::int64_t blocks = 0;
  if (max_blocks > 0) {
    ExistenceCursor<Probe> cursor(probe, sg, s - 1, s, max_blocks);
    blocks = cursor.first_absent(0, max_blocks);
  }
  std::int64_t len = blocks * b;
  if (a < b) {
    // Fine-grained phase: one more, partially filled block ending at the last present hash.
    const std::int64_t sub = floor_div(b, a);
    const std::int64_t first = blocks * sub;
    const std::int64_t top = min64(min64(first + sub - 1, floor_div(max_len, a)), n) - 1;
    if (top >= first) {
      ExistenceCursor<Probe> cursor(probe, sg, top, -1, top - first + 1);
      for (std::int64_t f = top; f >= first; --f) {
        if (cursor.at(top - f)) {
          ++blocks;
          len = (f + 1) * a;
          break;
        }
      }
    }
  }
  if (drop && len > 0) {
    len -= min64(a, b);
  }
  len -= floor_mod(len, a);
  out.num_blocks = min64(blocks, ceil_div(len, b));
  out.num_placeholders = 0;
  return len;
}

/// Sliding window and sliding-window MLA (SEMANTICS.md 4.2).
/// The reference indexes block total-1 first, so a bound past the last whole block fails like
/// its IndexError (invalid_argument).
template <class Probe>
PREFIXHIT_HD ErrorKind find_sliding_window(const LookupPlan& plan, int sg, std::int64_t n,
                                           std::int64_t max_len, bool drop, const Probe& probe,
                                           GroupHit& out, std::int64_t& hit_len) {
  const SpecGroupPlan& spec = plan.spec_groups[sg];
  const std::int64_t b = spec.block_size;
  const std::int64_t a = plan.alignment;
  if (plan.window_alignment_error && floor_mod(a, b) != 0) {
    return ErrorKind::unsupported_alignment_sliding_window;
  }
  // With a < b (vllm-0.33, partial forced on) a divides b, so every alignment test below passes.
  const std::int64_t s = floor_div(b, plan.hash_block_size);
  const std::int64_t need = ceil_div(spec.window - 1, b) + (drop ? 1 : 0);
  const std::int64_t total = floor_div(max_len, b);
  if (total > floor_div(n, s)) {
    return ErrorKind::invalid_argument;
  }
  out.num_blocks = total;
  out.num_placeholders = total;
  std::int64_t run = 0;
  bool found = false;
  if (total > 0) {
    // Scan from the last block down; item k is block total-1-k. Where every block is held the
    // scan reads the unaligned top blocks and then `need` more: its first window asks for just
    // those (not the probe's default 8), so a full store costs one window of the keys it needs.
    const std::int64_t first_window = unaligned_top_blocks(total, b, a, drop ? 0 : 1) + need;
    ExistenceCursor<Probe> cursor(probe, sg, total * s - 1, -s, total, first_window);
    for (std::int64_t i = total - 1; i >= 0; --i) {
      if (run == 0 && b != a) {
        const std::int64_t edge = drop ? i : i + 1;
        if (floor_mod(edge * b, a) != 0) {
          // A streak starting here would not end on the alignment, and run stays 0 whether or
          // not the block is held: its bit is not read (a probe that reads per key skips it).
          continue;
        }
      }
      if (!cursor.at(total - 1 - i)) {
        run = 0;
        continue;
      }
      ++run;
      if (run >= need) {
        out.num_blocks = i + run;
        out.num_placeholders = i;
        found = true;
        break;
      }
    }
  }
  if (!found) {
    // Only a streak that reaches block 0 survives (a prefix shorter than the window).
    out.num_blocks = run;
    out.num_placeholders = 0;
    if (run > 0 && b != a) {
      while (out.num_blocks > 0 && floor_mod(out.num_blocks * b, a) != 0) {
        pop_block(out);
      }
    }
  }
  if (drop && out.num_blocks > 0) {
    pop_block(out);
    if (b != a) {
      while (out.num_blocks > 0 && floor_mod(out.num_blocks * b, a) != 0) {
        pop_block(out);
      }
    }
  }
  hit_len = out.num_blocks * b;
  return ErrorKind::ok;
}

/// Chunked local attention (SEMANTICS.md 4.3).
/// Like the reference, the walk fails (invalid_argument, its IndexError) only when it reaches a
/// block past the last whole one; placeholders before the chunk are never checked.
template <class Probe>
PREFIXHIT_HD ErrorKind find_chunked_local(const LookupPlan& plan, int sg, std::int64_t n,
                                          std::int64_t max_len, bool drop, const Probe& probe,
                                          GroupHit& out, std::int64_t& hit_len) {
  const SpecGroupPlan& spec = plan.spec_groups[sg];
  if (drop) {
    return ErrorKind::unsupported_eagle_chunked_local;
  }
  const std::int64_t b = spec.block_size;
  if (b != plan.alignment) {
    return ErrorKind::unsupported_alignment_chunked_local;
  }
  const std::int64_t s = floor_div(b, plan.hash_block_size);
  const std::int64_t start =
      max_len == 0 ? 0 : floor_div(max_len, spec.chunk_size) * spec.chunk_size;
  const std::int64_t skipped = floor_div(start, b);
  const std::int64_t total = floor_div(max_len, b);
  const std::int64_t readable = min64(total, floor_div(n, s));
  std::int64_t blocks = skipped;
  if (readable > skipped) {
    ExistenceCursor<Probe> cursor(probe, sg, (skipped + 1) * s - 1, s, readable - skipped);
    blocks = skipped + cursor.first_absent(0, readable - skipped);
  }
  if (blocks < total && blocks >= floor_div(n, s)) {
    return ErrorKind::invalid_argument;
  }
  out.num_blocks = blocks;
  out.num_placeholders = skipped;
  hit_len = blocks * b;
  return ErrorKind::ok;
}

/// Mamba (SEMANTICS.md 4.4). Never applies the EAGLE drop. The fine-grained probe stops at the
/// last hash; the block probe starts at block total-1, so a bound past the last whole block
/// fails like the reference's IndexError (invalid_argument).
template <class Probe>
PREFIXHIT_HD ErrorKind find_mamba(const LookupPlan& plan, int sg, std::int64_t n,
                                  std::int64_t max_len, const Probe& probe, GroupHit& out,
                                  std::int64_t& hit_len) {
  const std::int64_t b = plan.spec_groups[sg].block_size;
  const std::int64_t a = plan.alignment;
  out.num_blocks = 0;
  out.num_placeholders = 0;
  hit_len = 0;
  if (a < b) {
    const std::int64_t sub = floor_div(b, a);
    const std::int64_t top = min64(floor_div(max_len, a), n) - 1;
    if (top < 0) {
      return ErrorKind::ok;
    }
    ExistenceCursor<Probe> cursor(probe, sg, top, -1, top + 1);
    for (std::int64_t f = top; f >= 0; --f) {
      if (cursor.at(top - f)) {
        out.num_placeholders = floor_div(f, sub);
        out.num_blocks = out.num_placeholders + 1;
        hit_len = (f + 1) * a;
        return ErrorKind::ok;
      }
    }
    return ErrorKind::ok;
  }
  const std::int64_t s = floor_div(b, plan.hash_block_size);
  const std::int64_t total = floor_div(max_len, b);
  if (total > floor_div(n, s)) {
    return ErrorKind::invalid_argument;
  }
  if (total <= 0) {
    return ErrorKind::ok;
  }
  // The scan stops at the first held candidate: where the last one is held, it reads the
  // unaligned top blocks and that one.
  ExistenceCursor<Probe> cursor(probe, sg, total * s - 1, -s, total,
                                unaligned_top_blocks(total, b, a, 1) + 1);
  for (std::int64_t i = total - 1; i >= 0; --i) {
    if (b != a && floor_mod((i + 1) * b, a) != 0) {
      continue;  // not a candidate whether or not held: its bit is not read
    }
    if (!cursor.at(total - 1 - i)) {
      continue;
    }
    out.num_placeholders = i;
    out.num_blocks = i + 1;
    hit_len = (i + 1) * b;
    return ErrorKind::ok;
  }
  return ErrorKind::ok;
}

/// Runs spec group `sg`'s finder with bound `max_len`.
template <class Probe>
PREFIXHIT_HD ErrorKind run_finder(const LookupPlan& plan, int sg, std::int64_t n,
                                  std::int64_t max_len, bool drop, const Probe& probe,
                                  GroupHit& out, std::int64_t& hit_len) {
  switch (plan.spec_groups[sg].finder) {
    case FinderKind::full_attention:
      hit_len = find_full_attention(plan, sg, n, max_len, drop, probe, out);
      return ErrorKind::ok;
    case FinderKind::sliding_window:
      return find_sliding_window(plan, sg, n, max_len, drop, probe, out, hit_len);
    case FinderKind::chunked_local:
      return find_chunked_local(plan, sg, n, max_len, drop, probe, out, hit_len);
    case FinderKind::mamba:
      return find_mamba(plan, sg, n, max_len, probe, out, hit_len);
  }
  return ErrorKind::invalid_config;
}

/// Whether `max_len` is a length the lookup accepts: 0 <= max_len <= kMaxLookupTokens. A length
/// past the hashes is accepted: full attention stops at the last hash, as the reference does,
/// and a finder that would index past the hash list fails with invalid_argument (the
/// reference's IndexError), see the finders.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool max_length_in_range(std::int64_t n, std::int64_t max_len) {
  return n >= 0 && max_len >= 0 && max_len <= kMaxLookupTokens;
}

/// n*H, saturated far above any bound the fixed point compares it with (no overflow).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t hashed_tokens(const LookupPlan& plan,
                                                              std::int64_t n) {
  constexpr std::int64_t kCap = kMaxLookupTokens * 4;
  return n >= floor_div(kCap, plan.hash_block_size) ? kCap : n * plan.hash_block_size;
}

/// The bound the fixed point gives spec group `spec`'s finder for candidate `cur`: `cur`, or
/// with the EAGLE drop one block (one hash for fine-grained full attention) more, capped.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t fixed_point_bound(const LookupPlan& plan,
                                                                  const SpecGroupPlan& spec,
                                                                  std::int64_t n,
                                                                  std::int64_t max_length,
                                                                  std::int64_t cur, bool drop) {
  if (!drop || spec.finder == FinderKind::mamba) {
    return cur;
  }
  const bool fine = plan.partial && spec.finder == FinderKind::full_attention &&
                    spec.block_size > plan.hash_block_size;
  const std::int64_t margin = fine ? plan.hash_block_size : spec.block_size;
  return min64(cur + margin, plan.eagle_bound_by_hashes ? hashed_tokens(plan, n) : max_length);
}

/// The coordinator lookup (SEMANTICS.md 5): one spec group directly, several by the fixed point.
/// `hits` receives one GroupHit per spec group (all members of a spec group share it).
template <class Probe>
PREFIXHIT_HD ErrorKind find_longest_cache_hit(const LookupPlan& plan, std::int64_t n,
                                              std::int64_t max_length, bool apply_eagle,
                                              const Probe& probe, GroupHit* hits,
                                              std::int64_t& hit_length) {
  hit_length = 0;
  // Slot num_spec_groups stays empty: groups that are not prefix-cacheable read it.
  for (int k = 0; k <= plan.num_spec_groups && k < kMaxGroups; ++k) {
    hits[k] = GroupHit{};
  }
  if (!max_length_in_range(n, max_length)) {
    return ErrorKind::invalid_argument;
  }
  if (plan.num_spec_groups == 0) {
    hit_length = max_length;  // nothing shortens the candidate (SEMANTICS.md 11.3, K = 0)
    return ErrorKind::ok;
  }
  if (plan.num_spec_groups == 1) {
    const bool drop = apply_eagle && plan.spec_groups[0].use_eagle;
    return run_finder(plan, 0, n, max_length, drop, probe, hits[0], hit_length);
  }

  const bool simple = plan.num_spec_groups == 2 && plan.spec_groups[0].is_full_attention;
  std::int64_t len = max_length;
  std::uint32_t evaluated = 0;  // full-attention spec groups whose lists are set
  std::uint32_t verified = 0;
  std::int64_t full_len[kMaxGroups];  // hit length of each evaluated full-attention spec group
  for (;;) {
    std::int64_t cur = len;
    for (int k = 0; k < plan.num_spec_groups; ++k) {
      const SpecGroupPlan& spec = plan.spec_groups[k];
      const std::uint32_t bit = 1U << k;
      if (spec.is_full_attention && (evaluated & bit) != 0) {
        // Full attention is evaluated once; afterwards it only caps the candidate.
        cur = min64(cur, full_len[k]);
        continue;
      }
      const bool drop = apply_eagle && spec.use_eagle && (verified & bit) == 0;
      const std::int64_t bound = fixed_point_bound(plan, spec, n, max_length, cur, drop);
      std::int64_t found = 0;
      const ErrorKind err = run_finder(plan, k, n, bound, drop, probe, hits[k], found);
      if (err != ErrorKind::ok) {
        return err;
      }
      if (spec.is_full_attention) {
        evaluated |= bit;
        full_len[k] = found;
      }
      if (drop) {
        verified |= bit;
      } else if (found < cur) {
        verified = 0;
      }
      cur = found;
    }
    if (cur >= len) {
      break;
    }
    len = cur;
    if (simple) {
      break;
    }
  }
  for (int k = 0; k < plan.num_spec_groups; ++k) {
    if (plan.spec_groups[k].is_full_attention && (k == 0 || plan.truncate_every_full_attention)) {
      truncate_blocks(hits[k], ceil_div(len, plan.spec_groups[k].block_size));
    }
  }
  hit_length = len;
  return ErrorKind::ok;
}

}  // namespace prefixhit::detail
