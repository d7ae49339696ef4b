// Group specs: spec equality, the named constructors, the spec field names (and their typos)
// that a group dict may carry, and vLLM's partial-hits rule.
#include <algorithm>
#include <string>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

bool GroupSpec::same_spec(const GroupSpec& other, Semantics semantics) const noexcept {
  const bool window_kind =
      kind == GroupKind::sliding_window || kind == GroupKind::sliding_window_mla;
  // 0.33 compares a window group's coverage window, not its two parts (SEMANTICS.md 11.4).
  const bool windows_equal = semantics == Semantics::vllm_0_33 && window_kind
                                 ? sliding_window.has_value() == other.sliding_window.has_value() &&
                                       coverage_window() == other.coverage_window()
                                 : sliding_window == other.sliding_window &&
                                       extra_retained_tokens == other.extra_retained_tokens;
  return kind == other.kind && block_size == other.block_size &&
         num_kv_heads == other.num_kv_heads && head_size == other.head_size &&
         dtype == other.dtype && windows_equal &&
         attention_chunk_size == other.attention_chunk_size &&
         mamba_cache_mode == other.mamba_cache_mode && state_dim == other.state_dim &&
         bounded_replay == other.bounded_replay && identity == other.identity;
}

bool GroupSpec::prefix_cacheable() const noexcept {
  return kind != GroupKind::circular_buffer &&
         !(kind == GroupKind::sliding_window_mla && bounded_replay);
}

std::int64_t GroupSpec::coverage_window() const noexcept {
  return sliding_window.value_or(0) + extra_retained_tokens;
}

namespace {

constexpr std::string_view kSpecFields[] = {"kind",
                                            "block_size",
                                            "eagle",
                                            "num_kv_heads",
                                            "head_size",
                                            "dtype",
                                            "sliding_window",
                                            "attention_chunk_size",
                                            "mamba_cache_mode",
                                            "state_dim",
                                            "extra_retained_tokens",
                                            "bounded_replay"};

/// Real fields of vLLM's spec dataclasses that sit close to a known name; they are identity.
constexpr std::string_view kIdentityFields[] = {"head_size_v", "dtypes", "shapes", "block_sizes"};

std::string normalise_name(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '-') {
      c = '_';
    }
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    out.push_back(c);
  }
  return out;
}

/// Edit distance counting an adjacent transposition as one edit ("eagel" is one from "eagle").
std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) {
    return limit + 1;
  }
  const std::size_t w = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * w);
  for (std::size_t i = 0; i <= a.size(); ++i) {
    for (std::size_t j = 0; j <= b.size(); ++j) {
      if (i == 0 || j == 0) {
        d[i * w + j] = i + j;
        continue;
      }
      std::size_t best = std::min({d[(i - 1) * w + j] + 1, d[i * w + j - 1] + 1,
                                   d[(i - 1) * w + j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        best = std::min(best, d[(i - 2) * w + j - 2] + 1);
      }
      d[i * w + j] = best;
    }
  }
  return d[a.size() * w + b.size()];
}

}  // namespace

span<const std::string_view> spec_field_names() noexcept {
  return span<const std::string_view>(kSpecFields, sizeof(kSpecFields) / sizeof(kSpecFields[0]));
}

std::string_view spec_field_typo(std::string_view name) noexcept {
  for (std::string_view field : kSpecFields) {
    if (name == field) {
      return {};
    }
  }
  for (std::string_view field : kIdentityFields) {
    if (name == field) {
      return {};
    }
  }
  try {
    const std::string norm = normalise_name(name);
    for (std::string_view field : kSpecFields) {
      // Short names tolerate one edit, longer ones two: "blok_size", "slidingwindow", "Dtype".
      const std::size_t limit = field.size() <= 5 ? 1 : 2;
      if (norm == field || edit_distance(norm, field, limit) <= limit) {
        return field;
      }
    }
  } catch (...) {
    return {};  // out of memory for a name: no suggestion
  }
  return {};
}

bool partial_hits_rule(span<const GroupSpec> groups, std::int64_t hash_block_size,
                       std::int64_t dcp_world_size) {
  if (hash_block_size <= 0) {
    throw InvalidArgument("partial_hits_rule: hash_block_size must be positive, got " +
                          std::to_string(hash_block_size));
  }
  if (dcp_world_size < 1) {
    throw InvalidArgument("partial_hits_rule: dcp_world_size must be at least 1, got " +
                          std::to_string(dcp_world_size));
  }
  // (1) more than one group, cacheable or not.
  if (groups.size() <= 1) {
    return false;
  }
  bool mamba_align = false;
  for (const GroupSpec& g : groups) {
    // (2) a Mamba align group whose block spans several hash blocks.
    if (g.kind == GroupKind::mamba && g.mamba_cache_mode == MambaCacheMode::align &&
        (g.block_size > hash_block_size ||
         (dcp_world_size > 1 && g.block_size == hash_block_size))) {
      mamba_align = true;
    }
    // (3) every cacheable window / chunked-local group is exactly one hash block per rank.
    const bool block_granular = g.kind == GroupKind::sliding_window ||
                                g.kind == GroupKind::sliding_window_mla ||
                                g.kind == GroupKind::chunked_local;
    if (g.prefix_cacheable() && block_granular &&
        (hash_block_size % dcp_world_size != 0 ||
         g.block_size != hash_block_size / dcp_world_size)) {
      return false;
    }
  }
  return mamba_align;
}

namespace {
GroupSpec attention_spec(GroupKind kind, std::int64_t block_size, bool eagle,
                         std::int64_t num_kv_heads, std::int64_t head_size) {
  GroupSpec spec;
  spec.kind = kind;
  spec.block_size = block_size;
  spec.eagle = eagle;
  spec.num_kv_heads = num_kv_heads;
  spec.head_size = head_size;
  spec.dtype = "bfloat16";
  return spec;
}
}  // namespace

GroupSpec GroupSpec::full_attention(std::int64_t block_size, bool eagle) {
  return attention_spec(GroupKind::full_attention, block_size, eagle, 8, 128);
}

GroupSpec GroupSpec::mla_attention(std::int64_t block_size, bool eagle) {
  return attention_spec(GroupKind::mla_attention, block_size, eagle, 1, 512);
}

GroupSpec GroupSpec::sliding_window_attention(std::int64_t block_size, std::int64_t window,
                                              bool eagle) {
  GroupSpec spec = attention_spec(GroupKind::sliding_window, block_size, eagle, 8, 128);
  spec.sliding_window = window;
  return spec;
}

GroupSpec GroupSpec::sliding_window_mla(std::int64_t block_size, std::int64_t window, bool eagle) {
  GroupSpec spec = attention_spec(GroupKind::sliding_window_mla, block_size, eagle, 1, 512);
  spec.sliding_window = window;
  return spec;
}

GroupSpec GroupSpec::chunked_local(std::int64_t block_size, std::int64_t chunk_size, bool eagle) {
  GroupSpec spec = attention_spec(GroupKind::chunked_local, block_size, eagle, 8, 128);
  spec.attention_chunk_size = chunk_size;
  return spec;
}

GroupSpec GroupSpec::mamba(std::int64_t block_size, MambaCacheMode mode, bool eagle) {
  GroupSpec spec;
  spec.kind = GroupKind::mamba;
  spec.block_size = block_size;
  spec.eagle = eagle;
  spec.mamba_cache_mode = mode;
  spec.state_dim = 1;
  return spec;
}

GroupSpec GroupSpec::circular_buffer(std::int64_t block_size, bool eagle) {
  return attention_spec(GroupKind::circular_buffer, block_size, eagle, 8, 128);
}

}  // namespace prefixhit
