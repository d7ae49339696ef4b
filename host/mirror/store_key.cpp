// The mirror's view of vLLM's Mooncake store keys (parsed by store_keys.cpp), and the
// rank-namespace helper.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"
#include "prefixhit/store_keys.hpp"

namespace prefixhit {

bool parse_store_key_parts(std::string_view object_key, StoreKeyParts& out) {
  // One parser for vLLM's store keys (store_keys.cpp); the mirror keeps only what its index can
  // hold: a group id, and a digest of a width the index knows.
  const std::optional<StoreKey> key = try_parse_store_key(object_key);
  if (!key || !key->has_group || key->group_id >= kMaxGroups || key->model_name.empty() ||
      !BlockDigest::valid_size(key->digest.size())) {
    return false;
  }
  out.key = EventKey{};
  std::copy(key->digest.begin(), key->digest.end(), out.key.bytes.begin());
  out.key.digest_size = static_cast<std::uint8_t>(key->digest.size());
  out.key.group_id = key->group_id;
  out.cache_prefix = key->cache_prefix;
  out.model = key->model_name;
  out.rank = key->ns;
  return true;
}

std::vector<RankNamespace> rank_namespaces(int tp_size, int pcp_size, int dcp_size, int pp_size) {
  if (tp_size < 1 || pcp_size < 1 || dcp_size < 1 || pp_size < 1) {
    throw InvalidArgument("rank_namespaces: every size must be >= 1");
  }
  const long long total = 1LL * tp_size * pcp_size * dcp_size * pp_size;
  if (total > 64) {
    throw InvalidArgument("rank_namespaces: " + std::to_string(total) +
                          " rank namespaces (at most 64)");
  }
  std::vector<RankNamespace> out;
  for (int pp = 0; pp < pp_size; ++pp) {
    for (int tp = 0; tp < tp_size; ++tp) {
      for (int pcp = 0; pcp < pcp_size; ++pcp) {
        for (int dcp = 0; dcp < dcp_size; ++dcp) {
          out.push_back(RankNamespace{tp, pcp, dcp, pp});  // tp_rank, pcp_rank, dcp_rank, pp_rank
        }
      }
    }
  }
  return out;
}

}  // namespace prefixhit
