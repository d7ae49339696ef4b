// Block hashes for token prompts: a SHA-256 chain, so that prompts sharing a prefix share the
// digests of its whole blocks. Serving runtimes usually bring their own chain (vLLM's); this one
// serves the demo, the benchmarks and runtimes that have none.
#pragma once

#include <cstdint>
#include <vector>

#include "prefixhit/types.hpp"

namespace prefixhit {

/// SHA-256 of `size` bytes.
BlockDigest sha256(const std::uint8_t* data, std::size_t size);

/// Digests of the whole hash blocks of `tokens`: h[i] = SHA-256(h[i-1] || tokens of block i as
/// little-endian int32), with h[-1] = `root` (all zero by default; a cache salt can go there).
/// Only whole blocks are hashed: floor(tokens.size() / hash_block_size) digests.
/// Throws InvalidArgument unless hash_block_size > 0.
std::vector<BlockDigest> hash_prompt(span<const std::int32_t> tokens, std::int64_t hash_block_size,
                                     const BlockDigest& root = BlockDigest{});

}  // namespace prefixhit
