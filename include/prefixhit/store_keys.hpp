// vLLM's Mooncake store keys: the object key of one (rank namespace, KV-cache group, block digest)
//
//   [{cache_prefix}@]{model_name}@tp_rank:{t}@pcp{p}@dcp{d}@pp_rank:{r}@group:{g}@{hex digest}
//
// and the rank namespaces a lookup must find a block in. Every rank of a deployment writes its own
// shard of a block under its own namespace; a block is reusable only when every namespace the
// loading ranks read holds it (the all-namespaces rule). Ranks that would write byte-identical
// shards (TP ranks sharing a KV head, MLA's replicated latent) are read through one namespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prefixhit/types.hpp"

namespace prefixhit {

/// One rank's key namespace: (tp, pcp, dcp, pp) as they appear in the key.
struct RankNamespace {
  int tp_rank = 0;
  int pcp_rank = 0;
  int dcp_rank = 0;
  int pp_rank = 0;

  friend bool operator==(const RankNamespace& a, const RankNamespace& b) noexcept {
    return a.tp_rank == b.tp_rank && a.pcp_rank == b.pcp_rank && a.dcp_rank == b.dcp_rank &&
           a.pp_rank == b.pp_rank;
  }
  friend bool operator!=(const RankNamespace& a, const RankNamespace& b) noexcept {
    return !(a == b);
  }
};

/// A deployment's parallel layout, as vLLM's parallel config and model config give it.
struct ParallelLayout {
  int tp_size = 1;       ///< tensor parallel
  int pcp_size = 1;      ///< prefill context parallel
  int dcp_size = 1;      ///< decode context parallel (reuses the TP ranks: dcp = tp % dcp_size)
  int pp_size = 1;       ///< pipeline parallel
  int num_kv_heads = 1;  ///< total KV heads of the model (1 for MLA models)
};

/// How many TP ranks write a byte-identical copy of a group's blocks: 1 under DCP and for Mamba
/// state, tp_size for MLA kinds (the latent is replicated), else max(1, tp_size / num_kv_heads).
/// Throws InvalidArgument for sizes below 1.
int tp_replication_factor(const GroupSpec& spec, const ParallelLayout& layout);

/// The namespaces a lookup of a group with this replication factor must find a block in, in
/// vLLM's order: pcp rank, then TP shard (tp_size / factor of them), then pp rank. The dcp rank
/// is tp % dcp_size. Throws InvalidArgument for sizes below 1 or a factor that is not 1 under DCP.
std::vector<RankNamespace> rank_namespaces(const ParallelLayout& layout, int replication_factor);

/// The parts of a key that name a deployment: both are copied into the key verbatim.
struct StoreKeyFormat {
  std::string cache_prefix;  ///< empty: no prefix (and no '@' before the model name)
  std::string model_name;    ///< vLLM: the basename of the model path
};

/// `[{cache_prefix}@]{model_name}@tp_rank:{t}@pcp{p}@dcp{d}@pp_rank:{r}@group:{g}` (no '@' after).
std::string store_key_prefix(const StoreKeyFormat& format, const RankNamespace& ns, int group_id);

/// Lowercase hex of a digest, two digits per byte.
std::string digest_hex(const BlockDigest& digest);

/// The full key: store_key_prefix(...) + "@" + digest_hex(digest).
std::string store_key(const StoreKeyFormat& format, const RankNamespace& ns, int group_id,
                      const BlockDigest& digest);

/// A store key taken apart.
struct StoreKey {
  std::string cache_prefix;  ///< "" when the key has none; may itself contain '@'
  std::string model_name;    ///< the field right before "@tp_rank:"
  RankNamespace ns;
  bool has_group = true;  ///< false for the older group-less form (then group_id is 0)
  int group_id = 0;
  /// The digest's bytes (1 to 32 of them: 8, 16 and 32 are the widths vLLM's hashes have).
  std::vector<std::uint8_t> digest;
};

/// Parses a key of the format above (also the group-less form
/// `...@pp_rank:{r}@{hex}` of older vLLM releases). Numbers are non-negative decimals; the
/// digest is 2 to 64 hex digits, an even count, either case. Returns nullopt for any other key
/// (another connector's keys, plain integers) so that an event consumer can count and skip them.
std::optional<StoreKey> try_parse_store_key(std::string_view key);

/// try_parse_store_key, but throws InvalidArgument naming what is wrong.
StoreKey parse_store_key(std::string_view key);

}  // namespace prefixhit
