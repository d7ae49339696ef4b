// RouterScores::result and the top-k per request (issue 12).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit {

LookupResult RouterScores::result(std::size_t r, int w) const {
  if (r >= num_requests || w < 0 || w >= num_workers) {
    throw InvalidArgument("router scores: (request " + std::to_string(r) + ", worker " +
                          std::to_string(w) + ") is out of range (" + std::to_string(num_requests) +
                          " x " + std::to_string(num_workers) + ")");
  }
  const std::size_t row = r * static_cast<std::size_t>(num_workers) + static_cast<std::size_t>(w);
  LookupResult out;
  out.hit_length = hit_lengths[row];
  const auto g = static_cast<std::size_t>(num_groups);
  out.groups.resize(g);
  for (std::size_t gid = 0; gid < g; ++gid) {
    out.groups[gid] = GroupHit{num_blocks[row * g + gid], num_placeholders[row * g + gid]};
  }
  return out;
}

std::vector<std::int32_t> top_k_workers(const RouterScores& scores, int k,
                                        span<const double> load) {
  if (k < 1) {
    throw InvalidArgument("top_k_workers: k must be at least 1, got " + std::to_string(k));
  }
  const auto nw = static_cast<std::size_t>(scores.num_workers);
  if (!load.empty() && load.size() != nw) {
    throw InvalidArgument("top_k_workers: load has " + std::to_string(load.size()) +
                          " entries but there are " + std::to_string(nw) + " workers");
  }
  const auto kk = static_cast<std::size_t>(k);
  std::vector<std::int32_t> out(scores.num_requests * kk, -1);
  std::vector<std::int32_t> order(nw);
  for (std::size_t r = 0; r < scores.num_requests; ++r) {
    const std::int64_t* hit = scores.hit_lengths.data() + r * nw;
    std::iota(order.begin(), order.end(), 0);
    const auto better = [&](std::int32_t a, std::int32_t b) {
      if (hit[a] != hit[b]) {
        return hit[a] > hit[b];
      }
      if (!load.empty() && load[static_cast<std::size_t>(a)] != load[static_cast<std::size_t>(b)]) {
        return load[static_cast<std::size_t>(a)] < load[static_cast<std::size_t>(b)];
      }
      return a < b;
    };
    const std::size_t take = std::min(kk, nw);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take), order.end(),
                      better);
    std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take),
              out.begin() + static_cast<std::ptrdiff_t>(r * kk));
  }
  return out;
}

}  // namespace prefixhit
