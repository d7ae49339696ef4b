// The benchmark workloads (model shapes, synthetic requests, store contents), shared by
// `prefixhit bench`, `prefixhit demo`, the index CLI and the Google Benchmark suites.
#include <string>
#include <vector>

#include "host/cli/bench.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::cli {

namespace {

Config dsv4_flash() {
  Config c;
  c.hash_block_size = 4;
  c.scheduler_block_size = 256;
  c.use_eagle = true;
  c.groups = {GroupSpec::full_attention(256), GroupSpec::sliding_window_attention(64, 128),
              GroupSpec::sliding_window_attention(64, 128, true),
              GroupSpec::sliding_window_attention(4, 8),
              GroupSpec::sliding_window_attention(8, 128)};
  return c;
}

Config fa_3swa() {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 64;
  c.use_eagle = true;
  c.groups = {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 1024),
              GroupSpec::sliding_window_attention(16, 1024, true),
              GroupSpec::sliding_window_attention(32, 4096)};
  return c;
}

Config fa_mamba_align() {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 64;
  c.groups = {GroupSpec::full_attention(64), GroupSpec::mamba(64, MambaCacheMode::align)};
  return c;
}

/// splitmix64: a fast, well-mixed stream for synthetic digests.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> names = {"dsv4-flash", "fa-3swa", "fa-mamba-align"};
  return names;
}

Workload make_workload(const std::string& name, std::int64_t tokens) {
  Workload w;
  w.name = name;
  w.tokens = tokens > 0 ? tokens : 131072;
  if (name == "dsv4-flash") {
    w.config = dsv4_flash();
  } else if (name == "fa-3swa") {
    w.config = fa_3swa();
  } else if (name == "fa-mamba-align") {
    w.config = fa_mamba_align();
  } else {
    throw InvalidArgument("unknown workload '" + name +
                          "' (expected dsv4-flash, fa-3swa or fa-mamba-align)");
  }
  if (w.tokens < w.config.scheduler_block_size) {
    throw InvalidArgument("--tokens must be at least the scheduler block size (" +
                          std::to_string(w.config.scheduler_block_size) + ")");
  }
  return w;
}

std::vector<BlockDigest> make_request_hashes(const Workload& workload, std::int64_t requests,
                                             std::uint64_t seed) {
  if (requests <= 0) {
    throw InvalidArgument("requests must be positive, got " + std::to_string(requests));
  }
  const std::int64_t n = workload.tokens / workload.config.hash_block_size;
  std::vector<BlockDigest> out(static_cast<std::size_t>(n * requests));
  std::uint64_t state = seed;
  for (BlockDigest& d : out) {
    for (std::size_t w = 0; w < 4; ++w) {
      const std::uint64_t word = splitmix64(state);
      for (std::size_t b = 0; b < 8; ++b) {
        d.bytes[8 * w + b] = static_cast<std::uint8_t>(word >> (8 * b));
      }
    }
  }
  return out;
}

void fill_store(BlockIndex& index, Namespace ns, const Coordinator& coordinator,
                span<const BlockDigest> hashes, std::int64_t tokens, StoreShape shape) {
  const Config& config = coordinator.config();
  std::vector<ChunkMask> masks;
  if (shape == StoreShape::store_mask_roundtrip) {
    masks = coordinator.store_mask(coordinator.align_lookup_length(tokens), 0, tokens);
  }
  const std::int64_t hole_token = tokens * 3 / 4;
  for (std::size_t g = 0; g < config.groups.size(); ++g) {
    const std::int64_t b = config.groups[g].block_size;
    const std::vector<BlockDigest> keys = coordinator.chunk_keys(hashes, b);
    std::vector<BlockDigest> kept;
    kept.reserve(keys.size());
    for (std::size_t j = 0; j < keys.size(); ++j) {
      const auto chunk = static_cast<std::int64_t>(j);
      if (shape == StoreShape::with_hole && chunk == hole_token / b) {
        continue;
      }
      if (shape == StoreShape::store_mask_roundtrip && !masks[g].contains(chunk)) {
        continue;
      }
      kept.push_back(keys[j]);
    }
    index.insert(ns, static_cast<int>(g), kept);
  }
}

}  // namespace prefixhit::cli
