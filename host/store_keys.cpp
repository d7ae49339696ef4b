// vLLM's Mooncake store keys: rank namespaces, formatting and parsing.
#include "prefixhit/store_keys.hpp"

#include <algorithm>
#include <charconv>
#include <string>

#include "host/hex.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

namespace {

void require_size(int value, const char* what) {
  if (value < 1) {
    throw InvalidArgument(std::string("parallel layout: ") + what + " must be at least 1, got " +
                          std::to_string(value));
  }
}

void require_layout(const ParallelLayout& layout) {
  require_size(layout.tp_size, "tp_size");
  require_size(layout.pcp_size, "pcp_size");
  require_size(layout.dcp_size, "dcp_size");
  require_size(layout.pp_size, "pp_size");
  require_size(layout.num_kv_heads, "num_kv_heads");
}

/// Reads a non-negative decimal int that fills `text`; false otherwise.
bool parse_int(std::string_view text, int& out) {
  if (text.empty() || text.size() > 9) {
    return false;
  }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

bool parse_labeled(std::string_view field, std::string_view label, int& out) {
  return field.substr(0, label.size()) == label && parse_int(field.substr(label.size()), out);
}

/// Parses `key`; on failure returns false with `why` set.
bool parse(std::string_view key, StoreKey& out, std::string& why) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = key.find('@', start);
    parts.push_back(key.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) {
      break;
    }
    start = at + 1;
  }
  // From the right: digest, [group:G], pp_rank:R, dcpD, pcpP, tp_rank:T, model, [prefix...].
  if (parts.size() < 6) {
    why = "has " + std::to_string(parts.size()) + " '@'-separated fields, expected at least 6";
    return false;
  }
  const std::string_view hex = parts.back();
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() > 2 * BlockDigest::kSize) {
    why = "digest field '" + std::string(hex) + "' is not 2 to 64 hex digits (an even count)";
    return false;
  }
  out.digest.resize(hex.size() / 2);
  if (detail::decode_hex(hex, out.digest.data()) != std::string_view::npos) {
    why = "digest field '" + std::string(hex) + "' has a non-hex character";
    return false;
  }
  std::size_t i = parts.size() - 2;  // the field before the digest
  out.has_group = parts[i].substr(0, 6) == "group:";
  out.group_id = 0;
  if (out.has_group) {
    if (!parse_labeled(parts[i], "group:", out.group_id)) {
      why = "group field '" + std::string(parts[i]) + "' is not group:<non-negative int>";
      return false;
    }
    --i;
  }
  if (i < 4) {
    why = "lacks the tp_rank/pcp/dcp/pp_rank fields before the digest";
    return false;
  }
  RankNamespace& ns = out.ns;
  if (!parse_labeled(parts[i], "pp_rank:", ns.pp_rank) ||
      !parse_labeled(parts[i - 1], "dcp", ns.dcp_rank) ||
      !parse_labeled(parts[i - 2], "pcp", ns.pcp_rank) ||
      !parse_labeled(parts[i - 3], "tp_rank:", ns.tp_rank)) {
    why = "fields '" + std::string(parts[i - 3]) + "@" + std::string(parts[i - 2]) + "@" +
          std::string(parts[i - 1]) + "@" + std::string(parts[i]) +
          "' are not tp_rank:<int>@pcp<int>@dcp<int>@pp_rank:<int>";
    return false;
  }
  const std::size_t model = i - 4;
  if (parts[model].empty()) {
    why = "model name is empty";
    return false;
  }
  out.model_name = std::string(parts[model]);
  // Everything before the model name is the cache prefix (which may contain '@').
  const std::size_t prefix_end = static_cast<std::size_t>(parts[model].data() - key.data());
  out.cache_prefix = prefix_end == 0 ? std::string() : std::string(key.substr(0, prefix_end - 1));
  return true;
}

}  // namespace

int tp_replication_factor(const GroupSpec& spec, const ParallelLayout& layout) {
  require_layout(layout);
  if (layout.dcp_size > 1 || spec.kind == GroupKind::mamba) {
    return 1;  // DCP shards every group by rank; Mamba state is per rank
  }
  if (spec.kind == GroupKind::mla_attention || spec.kind == GroupKind::sliding_window_mla) {
    return layout.tp_size;  // the latent cache is the same on every TP rank
  }
  return std::max(1, layout.tp_size / layout.num_kv_heads);
}

std::vector<RankNamespace> rank_namespaces(const ParallelLayout& layout, int replication_factor) {
  require_layout(layout);
  if (replication_factor < 1 || replication_factor > layout.tp_size) {
    throw InvalidArgument("rank_namespaces: replication factor must be in [1, tp_size=" +
                          std::to_string(layout.tp_size) + "], got " +
                          std::to_string(replication_factor));
  }
  if (layout.dcp_size > 1 && replication_factor != 1) {
    throw InvalidArgument(
        "rank_namespaces: under DCP every TP rank holds its own shard, so the "
        "replication factor must be 1, got " +
        std::to_string(replication_factor));
  }
  const int shards = layout.tp_size / replication_factor;
  std::vector<RankNamespace> out;
  out.reserve(static_cast<std::size_t>(layout.pcp_size) * static_cast<std::size_t>(shards) *
              static_cast<std::size_t>(layout.pp_size));
  for (int pcp = 0; pcp < layout.pcp_size; ++pcp) {
    for (int tp = 0; tp < shards; ++tp) {
      for (int pp = 0; pp < layout.pp_size; ++pp) {
        out.push_back(RankNamespace{tp, pcp, tp % layout.dcp_size, pp});
      }
    }
  }
  return out;
}

std::string store_key_prefix(const StoreKeyFormat& format, const RankNamespace& ns, int group_id) {
  std::string out;
  out.reserve(format.cache_prefix.size() + format.model_name.size() + 64);
  if (!format.cache_prefix.empty()) {
    out += format.cache_prefix;
    out += '@';
  }
  out += format.model_name;
  out += "@tp_rank:" + std::to_string(ns.tp_rank);
  out += "@pcp" + std::to_string(ns.pcp_rank);
  out += "@dcp" + std::to_string(ns.dcp_rank);
  out += "@pp_rank:" + std::to_string(ns.pp_rank);
  out += "@group:" + std::to_string(group_id);
  return out;
}

std::string digest_hex(const BlockDigest& digest) {
  return digest.to_hex();
}

std::string store_key(const StoreKeyFormat& format, const RankNamespace& ns, int group_id,
                      const BlockDigest& digest) {
  return store_key_prefix(format, ns, group_id) + "@" + digest_hex(digest);
}

std::optional<StoreKey> try_parse_store_key(std::string_view key) {
  StoreKey out;
  std::string why;
  if (!parse(key, out, why)) {
    return std::nullopt;
  }
  return out;
}

StoreKey parse_store_key(std::string_view key) {
  StoreKey out;
  std::string why;
  if (!parse(key, out, why)) {
    throw InvalidArgument("store key '" + std::string(key.substr(0, 200)) +
                          "' is not a vLLM Mooncake store key: it " + why);
  }
  return out;
}

}  // namespace prefixhit
