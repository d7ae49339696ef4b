// Remote mode's planning: the candidate slots of every (request, group), the candidates a round
// asks and their key strings, and the rounds themselves (one_round asks every candidate at once;
// multi_round asks what the finders read, round by round). See remote.hpp.
#include "host/remote_plan.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "host/hex.hpp"
#include "host/nvtx.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

using detail::floor_div;
using remote::GroupKey;
using remote::kNotCandidate;
using remote::kPending;
using remote::kUnasked;
using remote::Unknown;

RemoteLookup::Impl::Impl(const Coordinator& coordinator, const StoreLayout& layout,
                         const RemoteOptions& opts)
    : coord(coordinator), options(opts), num_groups(coordinator.num_groups()) {
  if (options.plan == RemotePlan::multi_round && options.max_rounds < 2) {
    throw InvalidArgument("remote lookup: max_rounds must be at least 2 for multi_round, got " +
                          std::to_string(options.max_rounds));
  }
  if (layout.namespaces.size() != static_cast<std::size_t>(num_groups)) {
    throw InvalidArgument("store layout has namespaces for " +
                          std::to_string(layout.namespaces.size()) + " groups, the coordinator " +
                          std::to_string(num_groups));
  }
  if (layout.format.model_name.empty()) {
    throw InvalidArgument("store layout: model_name must not be empty");
  }
  prefixes.resize(static_cast<std::size_t>(num_groups));
  for (int g = 0; g < num_groups; ++g) {
    const auto& spaces = layout.namespaces[static_cast<std::size_t>(g)];
    if (spaces.empty()) {
      throw InvalidArgument("store layout: group " + std::to_string(g) + " has no namespaces");
    }
    for (const RankNamespace& ns : spaces) {
      prefixes[static_cast<std::size_t>(g)].push_back(store_key_prefix(layout.format, ns, g) + "@");
    }
  }
}

void RemoteLookup::Impl::build_slots() {
  const detail::LookupPlan& plan = coord.plan();
  const std::size_t r_count = num_requests();
  const auto g_count = static_cast<std::size_t>(num_groups);
  const std::int64_t h = plan.hash_block_size;
  stride.assign(g_count, 1);
  slot_first.assign(r_count * g_count, 0);
  slot_count.assign(r_count * g_count, 0);
  std::int64_t total = 0;
  for (std::size_t r = 0; r < r_count; ++r) {
    const std::int64_t n = offsets[r + 1] - offsets[r];
    for (std::size_t g = 0; g < g_count; ++g) {
      const std::int64_t b = coord.config().groups[g].block_size;
      stride[g] = fine ? 1 : b / h;
      const std::int64_t count = fine ? std::min(n, floor_div(bounds[r], h))
                                      : std::min(n / stride[g], floor_div(bounds[r], b));
      slot_first[r * g_count + g] = total;
      slot_count[r * g_count + g] = std::max<std::int64_t>(count, 0);
      total += slot_count[r * g_count + g];
    }
  }
  ids.assign(static_cast<std::size_t>(total), kUnasked);
  if (fine) {
    return;  // vLLM asks every raw hash of every group when partial hits are on
  }
  // Window groups: only the chunks their lookup mask keeps (retention null: segments of S).
  for (std::size_t g = 0; g < g_count; ++g) {
    const detail::SpecGroupPlan& sg = plan.spec_groups[plan.spec_group_of[g]];
    if (sg.finder != FinderKind::sliding_window) {
      continue;
    }
    const std::int64_t b = sg.block_size;
    const std::int64_t shift = sg.use_eagle ? 1 : 0;
    const std::int64_t need = (sg.window - 1 + b - 1) / b + shift;
    const std::int64_t per = plan.scheduler_block_size / b;
    if (need >= per) {
      continue;
    }
    for (std::size_t r = 0; r < r_count; ++r) {
      std::int32_t* unit = ids.data() + slot_first[r * g_count + g];
      for (std::int64_t j = 0; j < slot_count[r * g_count + g]; ++j) {
        if (j < shift || (j - shift) % per < per - need) {
          unit[j] = kNotCandidate;
        }
      }
    }
  }
}

void RemoteLookup::Impl::assign(std::int64_t position, std::int32_t g, std::int64_t d) {
  const BlockDigest& digest = digests[static_cast<std::size_t>(d)];
  auto id = static_cast<std::int32_t>(cand_group.size());
  if (dedup) {
    const auto [it, inserted] = index.try_emplace(GroupKey{g, digest}, id);
    if (!inserted) {
      ids[static_cast<std::size_t>(position)] = it->second;
      return;
    }
  }
  cand_group.push_back(g);
  cand_digest.push_back(digest);
  cand_state.push_back(kPending);
  round_cands.push_back(id);
  ids[static_cast<std::size_t>(position)] = id;
}

template <class Pick>
void RemoteLookup::Impl::force(std::size_t r, Pick pick) {
  const auto g_count = static_cast<std::size_t>(num_groups);
  for (std::size_t g = 0; g < g_count; ++g) {
    if (!pick(static_cast<int>(g))) {
      continue;
    }
    const std::int64_t first = slot_first[r * g_count + g];
    for (std::int64_t u = 0; u < slot_count[r * g_count + g]; ++u) {
      if (ids[static_cast<std::size_t>(first + u)] == kUnasked) {
        const std::int64_t idx = fine ? u : (u + 1) * stride[g] - 1;
        assign(first + u, static_cast<std::int32_t>(g), offsets[r] + idx);
      }
    }
  }
}

void RemoteLookup::Impl::build_keys() {
  pending.clear();
  std::size_t count = 0;
  for (std::int32_t c : round_cands) {
    count += prefixes[static_cast<std::size_t>(cand_group[static_cast<std::size_t>(c)])].size();
  }
  pending.reserve(count);
  for (std::int32_t c : round_cands) {
    const BlockDigest& d = cand_digest[static_cast<std::size_t>(c)];
    for (const std::string& prefix :
         prefixes[static_cast<std::size_t>(cand_group[static_cast<std::size_t>(c)])]) {
      std::string key(prefix.size() + 2 * d.bytes.size(), '\0');
      std::memcpy(key.data(), prefix.data(), prefix.size());
      char* out = key.data() + prefix.size();
      for (std::uint8_t byte : d.bytes) {
        *out++ = detail::kHexDigits[byte >> 4];
        *out++ = detail::kHexDigits[byte & 15];
      }
      pending.push_back(std::move(key));
    }
  }
}

void RemoteLookup::Impl::plan_lazy() {
  for (;;) {
    std::vector<Unknown> unknowns;
    std::vector<std::size_t> open;
    for (std::size_t r = 0; r < num_requests(); ++r) {
      if (finished[r] != 0) {
        continue;
      }
      bool complete = false;
      run(r, &unknowns, complete);
      if (complete) {
        finished[r] = 1;
      } else {
        open.push_back(r);
      }
    }
    if (open.empty()) {
      done = true;
      return;
    }
    if (stats.rounds + 1 >= options.max_rounds) {
      for (std::size_t r : open) {
        force(r, [](int) { return true; });  // the last round: everything left
      }
    } else {
      for (const Unknown& u : unknowns) {
        if (ids[static_cast<std::size_t>(u.position)] == kUnasked) {
          assign(u.position, u.group, u.digest_index);
        }
      }
    }
    if (!round_cands.empty()) {
      build_keys();
      return;
    }
    // Every read resolved through candidates other requests already asked: run again.
  }
}

void RemoteLookup::Impl::start() {
  PREFIXHIT_NVTX_RANGE("prefixhit::remote_plan");
  fine = coord.plan().partial;
  build_slots();
  dedup = num_requests() > 1;
  if (dedup) {
    // Shared prefixes make about half the candidate units repeats; grow the table once.
    index.reserve(ids.size() / 2);
  }
  finished.assign(num_requests(), 0);
  const detail::LookupPlan& plan = coord.plan();
  const bool multi = options.plan == RemotePlan::multi_round;
  for (std::size_t r = 0; r < num_requests(); ++r) {
    // multi_round asks full attention first: it stops at its first miss and caps every other
    // group's bound.
    force(r, [&](int g) {
      return !multi || plan.spec_groups[plan.spec_group_of[g]].is_full_attention;
    });
  }
  stats.candidates_total = static_cast<std::int64_t>(round_cands.size());
  if (dedup) {
    std::int64_t total = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      total += ids[i] >= 0 ? 1 : 0;
    }
    stats.candidates_total = total;
  }
  if (!round_cands.empty()) {
    build_keys();
  } else if (multi) {
    plan_lazy();
  } else {
    done = true;
  }
}

}  // namespace prefixhit
