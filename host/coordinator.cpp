// The coordinator on the host: validation, spec-group planning, lookups and masks.
#include "prefixhit/coordinator.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "host/checks.hpp"
#include "host/nvtx.hpp"
#include "host/probes.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

using detail::floor_div;

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
    case GroupKind::circular_buffer:
      break;  // never prefix-cacheable, so never planned
  }
  throw InvalidConfig("group kind has no finder");
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

void validate_spec(const GroupSpec& spec, std::size_t id, Semantics semantics) {
  const std::string name = group_name(id);
  require_positive(spec.block_size, name + ".block_size");
  // The 0.33 spec fields do not exist in the pr49069 reference: refuse them rather than guess.
  if (semantics == Semantics::pr49069) {
    if (spec.kind == GroupKind::circular_buffer) {
      throw InvalidConfig(name + ": kind circular_buffer needs semantics vllm-0.33");
    }
    if (spec.extra_retained_tokens != 0 || spec.bounded_replay) {
      throw InvalidConfig(name + ": extra_retained_tokens and bounded_replay need semantics " +
                          "vllm-0.33");
    }
  }
  if (spec.extra_retained_tokens != 0) {
    if (!is_window_kind(spec.kind)) {
      throw InvalidConfig(name + ": extra_retained_tokens is not a field of kind " +
                          to_string(spec.kind));
    }
    if (spec.extra_retained_tokens < 0 || spec.extra_retained_tokens > detail::kMaxConfigTokens) {
      throw InvalidConfig(name + ".extra_retained_tokens must be in [0, " +
                          std::to_string(detail::kMaxConfigTokens) + "], got " +
                          std::to_string(spec.extra_retained_tokens));
    }
  }
  if (spec.bounded_replay && spec.kind != GroupKind::sliding_window_mla) {
    throw InvalidConfig(name + ": bounded_replay is a field of sliding_window_mla only, not of " +
                        to_string(spec.kind));
  }
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
    require_positive(spec.coverage_window(),
                     name + " coverage window (sliding_window + " + "extra_retained_tokens)");
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
  if (!BlockDigest::valid_size(c.digest_size)) {
    throw InvalidConfig("digest_size must be 8, 16 or 32 bytes, got " +
                        std::to_string(c.digest_size));
  }
  for (std::size_t g = 0; g < n_groups; ++g) {
    validate_spec(c.groups[g], g, c.semantics);
  }
  // SEMANTICS.md 1.1; groups that are not prefix-cacheable skip checks (1) and (3) (11.3).
  const std::int64_t h = c.hash_block_size;
  const std::int64_t s = c.scheduler_block_size;
  for (std::size_t g = 0; g < n_groups; ++g) {
    const std::int64_t b = c.groups[g].block_size;
    if (c.groups[g].prefix_cacheable() && b % h != 0) {
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
    if (c.groups[g].prefix_cacheable() && s % b != 0) {
      throw InvalidConfig("scheduler_block_size (" + std::to_string(s) + ") is not a multiple of " +
                          group_name(g) + ".block_size (" + std::to_string(b) + ")");
    }
  }

  // Merge equal specs in id order, then put full attention first (stable). Groups that are not
  // prefix-cacheable join no spec group (SEMANTICS.md 11.3).
  for (std::size_t g = 0; g < n_groups; ++g) {
    if (!c.groups[g].prefix_cacheable()) {
      continue;
    }
    auto same = std::find_if(spec_groups_.begin(), spec_groups_.end(), [&](const SpecGroup& sg) {
      return sg.spec.same_spec(c.groups[g], c.semantics);
    });
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
  if (c.semantics == Semantics::vllm_0_33) {
    // 0.33: the flag is the coordinator's input; absent, the engine's rule computes it (11.1).
    plan_.partial = c.enable_partial_hash_hits.has_value()
                        ? *c.enable_partial_hash_hits
                        : partial_hits_rule(span<const GroupSpec>(c.groups), h);
  } else {
    plan_.partial = std::any_of(c.groups.begin(), c.groups.end(), [&](const GroupSpec& spec) {
      return spec.kind == GroupKind::mamba && spec.mamba_cache_mode == MambaCacheMode::align &&
             spec.block_size > h;
    });
    if (c.enable_partial_hash_hits && *c.enable_partial_hash_hits != plan_.partial) {
      throw InvalidConfig(std::string("enable_partial_hash_hits=") +
                          (*c.enable_partial_hash_hits ? "true" : "false") +
                          " contradicts semantics pr49069, which derives " +
                          (plan_.partial ? "true" : "false") +
                          " from the groups (a Mamba 'align' group with block_size > "
                          "hash_block_size); leave it unset, or use semantics vllm-0.33 to "
                          "choose it");
    }
  }
  plan_.alignment = plan_.partial ? h : s;
  plan_.digest_size = static_cast<std::int32_t>(c.digest_size);
  const bool v033 = c.semantics == Semantics::vllm_0_33;
  plan_.window_alignment_error = !v033;
  plan_.eagle_bound_by_hashes = v033;
  plan_.truncate_every_full_attention = v033;
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
    p.window = sg.spec.coverage_window();
    p.chunk_size = sg.spec.attention_chunk_size.value_or(0);
    p.first_member = next_member;
    p.num_members = static_cast<std::int32_t>(sg.group_ids.size());
    for (int id : sg.group_ids) {
      plan_.members[next_member++] = id;
      plan_.spec_group_of[id] = static_cast<std::int32_t>(k);
    }
  }
  for (std::size_t g = 0; g < n_groups; ++g) {
    if (!c.groups[g].prefix_cacheable()) {
      plan_.spec_group_of[g] = plan_.num_spec_groups;  // the empty slot: always []
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
  check_digests(keys, config_.digest_size, "chunk_keys: keys");
  return keys;
}

namespace {

/// The message for a finder error: names the spec group that cannot be looked up and why.
std::string describe_finder_error(const Coordinator& coordinator, ErrorKind kind,
                                  std::int64_t max_length, std::int64_t n, const char* what) {
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
  if (kind == ErrorKind::invalid_argument) {
    return std::string(what) + " " + std::to_string(max_length) + " reaches past the last of the " +
           std::to_string(n) + " hashes (" + std::to_string(plan.hash_block_size) +
           " tokens each) in a sliding-window, chunked-local or Mamba group, which the reference "
           "rejects (it indexes past the hash list); full attention alone stops at the last "
           "hash";
  }
  return std::string("lookup failed: ") + to_string(kind);
}

}  // namespace

namespace {

template <class Probe>
LookupResult lookup_with(const Coordinator& coordinator, std::int64_t n, std::int64_t max_length,
                         bool apply_eagle, const Probe& probe, const char* what) {
  const detail::LookupPlan& plan = coordinator.plan();
  if (!detail::max_length_in_range(n, max_length)) {
    throw InvalidArgument(detail::max_length_message(what, max_length));
  }
  GroupHit spec_hits[kMaxGroups];
  LookupResult result;
  ErrorKind err = ErrorKind::ok;
  if constexpr (std::is_same_v<Probe, detail::SourceProbe>) {
    // Fetch the probe set up front (issue 14); exact, and one overlapped pass over memory.
    detail::PlannedLookup lookup{probe.hashes,       n,    max_length,      apply_eagle, spec_hits,
                                 &result.hit_length, &err, probe.bad_digest};
    detail::run_planned_lookups(plan, *probe.source, &lookup, 1);
  } else {
    err = detail::find_longest_cache_hit(plan, n, max_length, apply_eagle, probe, spec_hits,
                                         result.hit_length);
  }
  detail::throw_if_bad_digest(probe, plan);
  if (err != ErrorKind::ok) {
    throw_error(err, describe_finder_error(coordinator, err, max_length, n, what));
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
  detail::check_store_width(store, config_.digest_size);
  std::int64_t bad_digest = -1;
  const detail::SourceProbe probe{&plan_, &store, hashes.data(),
                                  store.checks_hash_widths() ? nullptr : &bad_digest};
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

}  // namespace prefixhit
