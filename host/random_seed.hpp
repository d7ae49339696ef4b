// The seed of a per-process or per-index hash secret, drawn once in one place for every hashed
// table of the library (BlockIndex, DeviceBlockIndex, KeySet, the router's ResidencyIndex).
#pragma once

#include <cstdint>

#include "prefixhit/detail/slot_hash.hpp"

namespace prefixhit::detail {

/// A nonzero 64-bit seed from std::random_device, or from the clock where the device cannot be
/// opened: the secret must differ between processes so that crafted digests cannot aim at one
/// bucket, but it need not be a cryptographic secret.
std::uint64_t random_hash_seed() noexcept;

/// make_hash_key(seed), after checking that this CPU runs the slot hash this library was built
/// for: a build with the CPU's AES instructions (PREFIXHIT_CPU_AES) throws Unavailable on a CPU
/// without them, instead of stopping on an illegal instruction at the first hash.
IndexHashKey checked_hash_key(std::uint64_t seed);

}  // namespace prefixhit::detail
