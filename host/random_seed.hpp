// The seed of a per-process or per-index hash secret, drawn once in one place for every hashed
// table of the library (BlockIndex, DeviceBlockIndex, KeySet, the router's ResidencyIndex).
#pragma once

#include <cstdint>

namespace prefixhit::detail {

/// A nonzero 64-bit seed from std::random_device, or from the clock where the device cannot be
/// opened: the secret must differ between processes so that crafted digests cannot aim at one
/// bucket, but it need not be a cryptographic secret.
std::uint64_t random_hash_seed() noexcept;

}  // namespace prefixhit::detail
