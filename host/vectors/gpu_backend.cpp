// The GPU backend of the vectors runner: every lookup of a vector runs as a one-request batch
// on the device (gpu::BatchLookupEngine), against the case's store loaded into a
// DeviceBlockIndex. Masks and configuration still come from the host Coordinator.
#include <memory>
#include <string>
#include <vector>

#include "host/vectors/conformance.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit::conformance {

namespace {

/// The namespace the vectors' stores are loaded under. A nonzero one, so that a namespace mix-up
/// (probing namespace 0) shows as misses.
constexpr Namespace kVectorNamespace = 7;

class GpuBackend final : public Backend {
 public:
  std::string name() const override { return "gpu"; }

  LookupResult find_longest_cache_hit(const Coordinator& coordinator,
                                      span<const BlockDigest> hashes, std::int64_t max_length,
                                      const KeySet& store, bool apply_eagle) override {
    // A KeySet cannot be enumerated, and only the request's own digests can ever be asked
    // for, so the device index receives exactly the (group, hashes[i]) pairs the store holds.
    // Entries for other digests or for group ids outside the configuration never match either
    // way (SEMANTICS.md 9.3).
    return lookup(
        coordinator, hashes, max_length, apply_eagle,
        [&](int group_id, const BlockDigest& key) { return store.contains(group_id, key); });
  }

  LookupResult load_mask(const Coordinator& coordinator, span<const BlockDigest> hashes,
                         std::int64_t token_len) override {
    // SEMANTICS.md 6: the lookup with every key present and no EAGLE drop.
    return lookup(coordinator, hashes, token_len, false,
                  [](int /*group_id*/, const BlockDigest& /*key*/) { return true; });
  }

 private:
  template <class Present>
  LookupResult lookup(const Coordinator& coordinator, span<const BlockDigest> hashes,
                      std::int64_t max_length, bool apply_eagle, const Present& present) {
    const gpu::BatchLookupEngine engine(coordinator);
    index_.clear();
    std::vector<BlockDigest> keys;
    keys.reserve(hashes.size());
    for (int g = 0; g < coordinator.num_groups(); ++g) {
      keys.clear();
      for (const BlockDigest& digest : hashes) {
        if (present(g, digest)) {
          keys.push_back(digest);
        }
      }
      gpu::insert_host_keys(index_, kVectorNamespace, g, keys);
    }
    const std::vector<std::int64_t> offsets = {0, static_cast<std::int64_t>(hashes.size())};
    const std::vector<std::int64_t> max_lengths = {max_length};
    const std::vector<std::uint8_t> eagle = {static_cast<std::uint8_t>(apply_eagle ? 1 : 0)};
    LookupBatch batch;
    batch.digests = hashes;
    batch.offsets = offsets;
    batch.max_lengths = max_lengths;
    batch.apply_eagle = eagle;
    return engine.find_longest_cache_hits(batch, index_, kVectorNamespace).request(0);
  }

  /// Reused across ops (cleared each time): small, so its clear costs less than a new table.
  DeviceBlockIndex index_{make_options()};

  static DeviceBlockIndexOptions make_options() {
    DeviceBlockIndexOptions options;
    options.initial_capacity = std::size_t{1} << 14;
    return options;
  }
};

}  // namespace

std::unique_ptr<Backend> make_gpu_backend() {
  if (!gpu::device_available()) {
    throw Unavailable("the GPU backend cannot run: " + gpu::describe_device());
  }
  return std::make_unique<GpuBackend>();
}

}  // namespace prefixhit::conformance
