// The configuration-only part of a lookup, planned once on the host and copied by value to the
// device: spec groups in processing order, their finders, EAGLE flags and the alignment.
#pragma once

#include <cstdint>

namespace prefixhit {

/// At most this many KV-cache groups per configuration (group ids 0..kMaxGroups-1).
inline constexpr int kMaxGroups = 32;

/// The largest max_length / token_len a lookup accepts: far beyond any prompt, and small enough
/// that bound arithmetic (a length plus a block size) never overflows.
inline constexpr std::int64_t kMaxLookupTokens = std::int64_t{1} << 40;

/// Which finder a spec group uses (SEMANTICS.md 4). Several spec kinds share one finder.
enum class FinderKind : std::uint8_t { full_attention, sliding_window, chunked_local, mamba };

/// The result of one finder for one spec group. Every lookup list has the shape
/// `[placeholder] * num_placeholders + [loaded] * (num_blocks - num_placeholders)`, so two counts
/// describe it exactly; `expand` in the host API turns them back into the reference's lists.
struct GroupHit {
  std::int64_t num_blocks = 0;
  std::int64_t num_placeholders = 0;
};

namespace detail {

struct SpecGroupPlan {
  FinderKind finder = FinderKind::full_attention;
  bool is_full_attention = false;  ///< sorted first; evaluated once in the fixed point
  bool use_eagle = false;          ///< after the any-member rule and the fallback
  std::int64_t block_size = 0;
  std::int64_t window = 0;        ///< sliding window in tokens (vllm-0.33: the coverage window)
  std::int64_t chunk_size = 0;    ///< chunked local attention, in tokens
  std::int32_t first_member = 0;  ///< into LookupPlan::members
  std::int32_t num_members = 0;
};

struct LookupPlan {
  std::int64_t hash_block_size = 0;       ///< H
  std::int64_t scheduler_block_size = 0;  ///< S
  std::int64_t alignment = 0;             ///< A: H when partial, else S
  bool partial = false;                   ///< fine-grained (partial) hash hits
  // Rules that differ between the reference releases (SEMANTICS.md 11), set from
  // Config::semantics. The finders read these flags; there is one copy of each finder.
  /// pr49069: a window group whose block size does not divide A fails the lookup with
  /// unsupported_alignment_sliding_window. vllm-0.33: no such error (11.5).
  bool window_alignment_error = true;
  /// vllm-0.33: the fixed point's EAGLE bound is capped by n*H, not by max_length (11.6).
  bool eagle_bound_by_hashes = false;
  /// vllm-0.33: the final truncation applies to every full-attention spec group, not only the
  /// first (11.6).
  bool truncate_every_full_attention = false;
  std::int32_t num_groups = 0;
  /// Prefix-cacheable spec groups only (SEMANTICS.md 11.3); may be 0 under vllm-0.33.
  std::int32_t num_spec_groups = 0;
  SpecGroupPlan spec_groups[kMaxGroups];
  std::int32_t members[kMaxGroups];  ///< group ids, spec group by spec group
  /// group id -> spec group index. A group that is not prefix-cacheable maps to the slot
  /// num_spec_groups, which the lookup leaves empty (its list is always []).
  std::int32_t spec_group_of[kMaxGroups];
  std::int32_t digest_size = 32;  ///< bytes per digest (8, 16 or 32): part of every key
};

}  // namespace detail
}  // namespace prefixhit
