// Parsing vLLM's Mooncake store keys back into their parts, and the rank-namespace helpers.
// (The "remote" side formats these keys in include/prefixhit/store_keys.hpp; the two are to be
// folded together, and this parser is the only function that needs to move.)
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

namespace {

bool parse_uint(std::string_view s, int& out) {
  if (s.empty() || s.size() > 9) {
    return false;
  }
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

/// `segment` is `prefix` followed by a decimal number.
bool numbered(std::string_view segment, std::string_view prefix, int& out) {
  return segment.substr(0, prefix.size()) == prefix &&
         parse_uint(segment.substr(prefix.size()), out);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

}  // namespace

bool parse_store_key(const std::string& object_key, StoreKeyParts& out) {
  // Split from the right: the digest and the five rank/group segments are fixed; what is left
  // is "{model}" or "{cache_prefix}@{model}" (a prefix may itself contain '@').
  std::string_view rest(object_key);
  std::string_view seg[6];
  for (int i = 5; i >= 0; --i) {
    const std::size_t at = rest.rfind('@');
    if (at == std::string_view::npos) {
      return false;
    }
    seg[i] = rest.substr(at + 1);
    rest = rest.substr(0, at);
  }
  if (rest.empty()) {
    return false;
  }
  const std::string_view hex = seg[5];
  if (hex.size() != 16 && hex.size() != 32 && hex.size() != 64) {
    return false;
  }
  int group = 0;
  if (!numbered(seg[0], "tp_rank:", out.rank.tp) || !numbered(seg[1], "pcp", out.rank.pcp) ||
      !numbered(seg[2], "dcp", out.rank.dcp) || !numbered(seg[3], "pp_rank:", out.rank.pp) ||
      !numbered(seg[4], "group:", group) || group >= kMaxGroups) {
    return false;
  }
  out.key = EventKey{};
  for (std::size_t i = 0; i < hex.size() / 2; ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return false;
    }
    out.key.bytes[i] = static_cast<std::uint8_t>((hi << 4) | lo);
  }
  out.key.digest_size = static_cast<std::uint8_t>(hex.size() / 2);
  out.key.group_id = group;
  const std::size_t at = rest.rfind('@');
  if (at == std::string_view::npos) {
    out.cache_prefix.clear();
    out.model.assign(rest);
  } else {
    out.cache_prefix.assign(rest.substr(0, at));
    out.model.assign(rest.substr(at + 1));
  }
  return !out.model.empty();
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
          out.push_back(RankNamespace{tp, pcp, dcp, pp});
        }
      }
    }
  }
  return out;
}

}  // namespace prefixhit
