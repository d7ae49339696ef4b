// WorkerResidencySink: the event mirror's MirrorSink for one worker of a ResidencyIndex.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "host/checks.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit {

WorkerResidencySink::WorkerResidencySink(ResidencyIndex& index, WorkerId worker, int tier)
    : index_(&index), worker_(worker), tier_(tier) {
  if (worker >= static_cast<WorkerId>(index.num_workers())) {
    throw InvalidArgument("worker sink: worker " + std::to_string(worker) +
                          " is out of range [0, " + std::to_string(index.num_workers()) + ")");
  }
  if (tier < 0 || tier >= index.num_tiers()) {
    throw InvalidArgument("worker sink: tier " + std::to_string(tier) + " is out of range [0, " +
                          std::to_string(index.num_tiers()) + ")");
  }
}

void WorkerResidencySink::apply(Namespace ns, span<const EventKey> keys, bool insert) {
  // Group by (group id, width), checking every key before touching the index.
  std::map<std::pair<int, int>, std::vector<BlockDigest>> batches;
  for (const EventKey& key : keys) {
    if (key.group_id < 0 || key.group_id >= kMaxGroups) {
      throw InvalidArgument("worker sink: group id " + std::to_string(key.group_id) +
                            " is out of range [0, " + std::to_string(kMaxGroups) + ")");
    }
    batches[{key.group_id, key.digest_size}].push_back(to_index_digest(key));
  }
  detail::check_namespace(ns, "worker sink");
  for (const auto& [gw, digests] : batches) {
    check_digests(digests, static_cast<std::size_t>(gw.second), "worker sink: keys");
  }
  for (const auto& [gw, digests] : batches) {
    const auto width = static_cast<std::size_t>(gw.second);
    if (insert) {
      pairs_ += index_->insert(worker_, ns, gw.first, digests, width, tier_);
    } else {
      pairs_ -= index_->erase(worker_, ns, gw.first, digests, width, tier_);
    }
  }
}

void WorkerResidencySink::insert(Namespace ns, span<const EventKey> keys) {
  apply(ns, keys, true);
}
void WorkerResidencySink::erase(Namespace ns, span<const EventKey> keys) {
  apply(ns, keys, false);
}
std::size_t WorkerResidencySink::size() const {
  return pairs_;
}

}  // namespace prefixhit
