// The coordinator on the host: validation, spec-group planning, lookups and masks.
#include "prefixhit/coordinator.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "host/checks.hpp"
#include "host/nvtx.hpp"
#include "host/probes.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

using detail::ceil_div;
using detail::floor_div;
using detail::floor_mod;

namespace {

std::string group_name(std::size_t id) {
  return "groups[" + std::to_string(id) + "]";
}

bool is_full_attention_kind(GroupKind kind) {
  return kind == GroupKind::full_attention || kind == GroupKind::mla_attention;
}

bool is_window_kind(GroupKind kind) {
  return kind == GroupKind::sliding_window || kind == GroupKind::sliding_window_mla;
}

FinderKind finder_of(GroupKind kind) {
  switch (kind) {
    case GroupKind::full_attention:
    case GroupKind::mla_attention:
      return FinderKind::full_attention;
    case GroupKind::sliding_window:
    case GroupKind::sliding_window_mla:
      return FinderKind::sliding_window;
    case GroupKind::chunked_local:
      return FinderKind::chunked_local;
    case GroupKind::mamba:
      return FinderKind::mamba;
  }
  throw InvalidConfig("unknown group kind");
}

/// Sizes in tokens: positive, and no larger than any model could use (detail::kMaxConfigTokens),
/// which keeps every length computation of the finders and masks free of overflow.
void require_positive(std::int64_t value, const std::string& what) {
  if (value <= 0) {
    throw InvalidConfig(what + " must be positive, got " + std::to_string(value));
  }
  if (value > detail::kMaxConfigTokens) {
    throw InvalidConfig(what + " (" + std::to_string(value) +
                        ") exceeds the supported maximum of " +
                        std::to_string(detail::kMaxConfigTokens) + " tokens");
  }
}

void validate_spec(const GroupSpec& spec, std::size_t id) {
  const std::string name = group_name(id);
  require_positive(spec.block_size, name + ".block_size");
  if (spec.num_kv_heads < 0 || spec.head_size < 0 || spec.state_dim < 0) {
    throw InvalidConfig(name + ": num_kv_heads, head_size and state_dim must not be negative");
  }
  const bool window_allowed = is_window_kind(spec.kind) || spec.kind == GroupKind::full_attention;
  const bool chunk_allowed =
      spec.kind == GroupKind::chunked_local || spec.kind == GroupKind::full_attention;
  if (spec.sliding_window) {
    if (!window_allowed) {
      throw InvalidConfig(name + ": sliding_window is not a field of kind " + to_string(spec.kind));
    }
    require_positive(*spec.sliding_window, name + ".sliding_window");
  } else if (is_window_kind(spec.kind)) {
    throw InvalidConfig(name + ": kind " + to_string(spec.kind) + " needs sliding_window");
  }
  if (spec.attention_chunk_size) {
    if (!chunk_allowed) {
      throw InvalidConfig(name + ": attention_chunk_size is not a field of kind " +
                          to_string(spec.kind));
    }
    require_positive(*spec.attention_chunk_size, name + ".attention_chunk_size");
  } else if (spec.kind == GroupKind::chunked_local) {
    throw InvalidConfig(name + ": kind chunked_local needs attention_chunk_size");
  }
}

}  // namespace

Coordinator::Coordinator(Config config) : config_(std::move(config)) {
  const Config& c = config_;
  const std::size_t n_groups = c.groups.size();
  if (n_groups == 0) {
    throw InvalidConfig("a configuration needs at least one KV-cache group");
  }
  if (n_groups > static_cast<std::size_t>(kMaxGroups)) {
    throw InvalidConfig("at most " + std::to_string(kMaxGroups) + " KV-cache groups, got " +
                        std::to_string(n_groups));
  }
  require_positive(c.hash_block_size, "hash_block_size");
  require_positive(c.scheduler_block_size, "scheduler_block_size");
  if (c.retention_interval &&
      (*c.retention_interval < 0 || *c.retention_interval > detail::kMaxConfigTokens)) {
    throw InvalidConfig("retention_interval must be null, 0 or a positive token count up to " +
                        std::to_string(detail::kMaxConfigTokens) + ", got " +
                        std::to_string(*c.retention_interval));
  }
  for (std::size_t g = 0; g < n_groups; ++g) {
    validate_spec(c.groups[g], g);
  }
  // SEMANTICS.md 1.1.
  const std::int64_t h = c.hash_block_size;
  const std::int64_t s = c.scheduler_block_size;
  for (std::size_t g = 0; g < n_groups; ++g) {
    const std::int64_t b = c.groups[g].block_size;
    if (b % h != 0) {
      throw InvalidConfig(group_name(g) + ".block_size (" + std::to_string(b) +
                          ") is not a multiple of hash_block_size (" + std::to_string(h) + ")");
    }
  }
  if (s % h != 0) {
    throw InvalidConfig("scheduler_block_size (" + std::to_string(s) +
                        ") is not a multiple of hash_block_size (" + std::to_string(h) + ")");
  }
  for (std::size_t g = 0; g < n_groups; ++g) {
    const std::int64_t b = c.groups[g].block_size;
    if (s % b != 0) {
      throw InvalidConfig("scheduler_block_size (" + std::to_string(s) + ") is not a multiple of " +
                          group_name(g) + ".block_size (" + std::to_string(b) + ")");
    }
  }

  // Merge equal specs in id order, then put full attention first (stable).
  for (std::size_t g = 0; g < n_groups; ++g) {
    auto same = std::find_if(spec_groups_.begin(), spec_groups_.end(),
                             [&](const SpecGroup& sg) { return sg.spec.same_spec(c.groups[g]); });
    if (same == spec_groups_.end()) {
      spec_groups_.push_back(SpecGroup{{static_cast<int>(g)}, false, c.groups[g]});
      same = spec_groups_.end() - 1;
    } else {
      same->group_ids.push_back(static_cast<int>(g));
    }
    same->use_eagle = same->use_eagle || c.groups[g].eagle;
  }
  std::stable_sort(
      spec_groups_.begin(), spec_groups_.end(), [](const SpecGroup& a, const SpecGroup& b) {
        return is_full_attention_kind(a.spec.kind) && !is_full_attention_kind(b.spec.kind);
      });
  const bool any_flagged = std::any_of(spec_groups_.begin(), spec_groups_.end(),
                                       [](const SpecGroup& sg) { return sg.use_eagle; });
  if (c.use_eagle && !any_flagged) {
    for (SpecGroup& sg : spec_groups_) {
      sg.use_eagle = true;  // conservative fallback: nothing says which groups are drafts
    }
  }
  is_eagle_group_.assign(n_groups, 0);
  for (const SpecGroup& sg : spec_groups_) {
    if (sg.use_eagle) {
      for (int id : sg.group_ids) {
        eagle_group_ids_.push_back(id);
        is_eagle_group_[static_cast<std::size_t>(id)] = 1;
      }
    }
  }
  std::sort(eagle_group_ids_.begin(), eagle_group_ids_.end());

  // The device-copyable plan.
  plan_.hash_block_size = h;
  plan_.scheduler_block_size = s;
  plan_.partial = std::any_of(c.groups.begin(), c.groups.end(), [&](const GroupSpec& spec) {
    return spec.kind == GroupKind::mamba && spec.mamba_cache_mode == MambaCacheMode::align &&
           spec.block_size > h;
  });
  plan_.alignment = plan_.partial ? h : s;
  plan_.num_groups = static_cast<std::int32_t>(n_groups);
  plan_.num_spec_groups = static_cast<std::int32_t>(spec_groups_.size());
  std::int32_t next_member = 0;
  for (std::size_t k = 0; k < spec_groups_.size(); ++k) {
    const SpecGroup& sg = spec_groups_[k];
    detail::SpecGroupPlan& p = plan_.spec_groups[k];
    p.finder = finder_of(sg.spec.kind);
    p.is_full_attention = is_full_attention_kind(sg.spec.kind);
    p.use_eagle = sg.use_eagle;
    p.block_size = sg.spec.block_size;
    p.window = sg.spec.sliding_window.value_or(0);
    p.chunk_size = sg.spec.attention_chunk_size.value_or(0);
    p.first_member = next_member;
    p.num_members = static_cast<std::int32_t>(sg.group_ids.size());
    for (int id : sg.group_ids) {
      plan_.members[next_member++] = id;
      plan_.spec_group_of[id] = static_cast<std::int32_t>(k);
    }
  }
}

std::int64_t Coordinator::align_lookup_length(std::int64_t length) const noexcept {
  return floor_div(length, plan_.alignment) * plan_.alignment;
}

std::vector<BlockDigest> Coordinator::chunk_keys(span<const BlockDigest> hashes,
                                                 std::int64_t block_size) const {
  const std::int64_t h = plan_.hash_block_size;
  if (block_size <= 0 || block_size % h != 0) {
    throw InvalidArgument("chunk_keys: block_size (" + std::to_string(block_size) +
                          ") must be a positive multiple of hash_block_size (" + std::to_string(h) +
                          ")");
  }
  const std::size_t s = static_cast<std::size_t>(block_size / h);
  const std::size_t blocks = hashes.size() / s;
  std::vector<BlockDigest> keys(blocks);
  for (std::size_t j = 0; j < blocks; ++j) {
    keys[j] = hashes[(j + 1) * s - 1];
  }
  return keys;
}

namespace {

/// The message for a finder error: names the spec group that cannot be looked up and why.
std::string describe_finder_error(const Coordinator& coordinator, ErrorKind kind) {
  const detail::LookupPlan& plan = coordinator.plan();
  auto members = [&](std::size_t k) {
    std::string out = "[";
    for (std::size_t i = 0; i < coordinator.spec_groups()[k].group_ids.size(); ++i) {
      out += (i ? ", " : "") + std::to_string(coordinator.spec_groups()[k].group_ids[i]);
    }
    return out + "]";
  };
  const std::string a = std::to_string(plan.alignment);
  for (std::size_t k = 0; k < static_cast<std::size_t>(plan.num_spec_groups); ++k) {
    const detail::SpecGroupPlan& sg = plan.spec_groups[k];
    const std::string b = std::to_string(sg.block_size);
    if (kind == ErrorKind::unsupported_alignment_sliding_window &&
        sg.finder == FinderKind::sliding_window && plan.alignment % sg.block_size != 0) {
      return "sliding-window groups " + members(k) + " (block_size " + b +
             ") cannot be looked up: the lookup alignment " + a + " is not a multiple of it";
    }
    if (kind == ErrorKind::unsupported_alignment_chunked_local &&
        sg.finder == FinderKind::chunked_local && sg.block_size != plan.alignment) {
      return "chunked-local groups " + members(k) + " (block_size " + b +
             ") cannot be looked up: the lookup alignment is " + a + ", not " + b;
    }
    if (kind == ErrorKind::unsupported_eagle_chunked_local &&
        sg.finder == FinderKind::chunked_local && sg.use_eagle) {
      return "chunked-local groups " + members(k) +
             " cannot apply the EAGLE drop (the spec group is EAGLE-flagged)";
    }
  }
  return std::string("lookup failed: ") + to_string(kind);
}

}  // namespace

namespace {

template <class Probe>
LookupResult lookup_with(const Coordinator& coordinator, std::int64_t n, std::int64_t max_length,
                         bool apply_eagle, const Probe& probe, const char* what) {
  const detail::LookupPlan& plan = coordinator.plan();
  if (!detail::max_length_in_range(plan, n, max_length)) {
    throw InvalidArgument(detail::max_length_message(what, max_length, n, plan.hash_block_size));
  }
  GroupHit spec_hits[kMaxGroups];
  LookupResult result;
  const ErrorKind err = detail::find_longest_cache_hit(plan, n, max_length, apply_eagle, probe,
                                                       spec_hits, result.hit_length);
  if (err != ErrorKind::ok) {
    throw_error(err, describe_finder_error(coordinator, err));
  }
  result.groups.resize(static_cast<std::size_t>(plan.num_groups));
  for (int g = 0; g < plan.num_groups; ++g) {
    result.groups[static_cast<std::size_t>(g)] = spec_hits[plan.spec_group_of[g]];
  }
  return result;
}

}  // namespace

LookupResult Coordinator::find_longest_cache_hit(span<const BlockDigest> hashes,
                                                 std::int64_t max_length,
                                                 const ExistenceSource& store,
                                                 bool apply_eagle) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::find_longest_cache_hit");
  const detail::SourceProbe probe{&plan_, &store, hashes.data()};
  return lookup_with(*this, static_cast<std::int64_t>(hashes.size()), max_length, apply_eagle,
                     probe, "max_length");
}

LookupResult Coordinator::load_mask(span<const BlockDigest> hashes, std::int64_t token_len) const {
  return load_mask(static_cast<std::int64_t>(hashes.size()), token_len);
}

LookupResult Coordinator::load_mask(std::int64_t num_hashes, std::int64_t token_len) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::load_mask");
  if (num_hashes < 0) {
    throw InvalidArgument("load_mask: num_hashes must not be negative");
  }
  // The masks list one entry per block: the mask size limit applies (else 2^62 hashes spin).
  if (num_hashes > detail::kMaxMaskChunks) {
    throw InvalidArgument("load_mask: num_hashes " + std::to_string(num_hashes) +
                          " exceeds the limit of " + std::to_string(detail::kMaxMaskChunks) +
                          " hashes a mask may cover");
  }
  return lookup_with(*this, num_hashes, token_len, false, detail::AllPresentProbe{}, "token_len");
}

namespace {

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
                                          std::optional<std::int64_t> retention) const {
  const std::int64_t a_len = plan_.alignment;
  if (aligned_len < 0) {
    throw InvalidArgument("aligned_token_len must not be negative, got " +
                          std::to_string(aligned_len));
  }
  if (start_token < 0) {
    throw InvalidArgument("start_token must not be negative, got " + std::to_string(start_token));
  }
  if (num_prompt_tokens && *num_prompt_tokens < 0) {
    throw InvalidArgument("num_prompt_tokens must not be negative, got " +
                          std::to_string(*num_prompt_tokens));
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
  // Replay boundary, floored (num_prompt_tokens 0 gives -S).
  const std::int64_t boundary = num_prompt_tokens ? floor_div(*num_prompt_tokens - 1, s) * s : 0;

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
      const std::int64_t e = is_eagle_group_[g];
      const std::int64_t need = ceil_div(*spec.sliding_window - 1, b) + e;
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
      if (retention && num_prompt_tokens) {
        const std::int64_t edge = boundary / b + e;
        keep_range(mask, edge - need, edge);
      }
    } else if (spec.kind == GroupKind::mamba) {
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
      if (num_prompt_tokens) {
        const std::int64_t chunk = boundary / b - 1;
        keep_range(mask, chunk, chunk + 1);
      }
    }
    // Full attention, MLA and chunked local: always every chunk.
  }
  return out;
}

std::vector<ChunkMask> Coordinator::store_mask(
    std::int64_t aligned_token_len, std::int64_t start_token,
    std::optional<std::int64_t> num_prompt_tokens) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::store_mask");
  return masks(aligned_token_len, start_token, num_prompt_tokens, config_.retention_interval);
}

std::vector<ChunkMask> Coordinator::lookup_mask(std::int64_t aligned_token_len) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::lookup_mask");
  return masks(aligned_token_len, 0, std::nullopt, std::nullopt);
}

}  // namespace prefixhit
