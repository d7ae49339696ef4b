// Remote mode's request-plan state (internal to host/remote.cpp and host/remote_plan.cpp): the
// candidate slots of every (request, group), the deduplicated candidates and their answers, and
// the round being asked. remote_plan.cpp plans the rounds; remote.cpp reads the answers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/remote.hpp"

namespace prefixhit {

namespace remote {

constexpr std::int32_t kNotCandidate = -1;  // outside the candidate set: absent
constexpr std::int32_t kUnasked = -2;       // a candidate whose key has not been asked yet

enum : std::uint8_t { kPending = 0, kPresent = 1, kAbsent = 2 };

struct GroupKey {
  std::int32_t group;
  BlockDigest digest;
  friend bool operator==(const GroupKey& a, const GroupKey& b) noexcept {
    return a.group == b.group && a.digest == b.digest;
  }
};

struct GroupKeyHash {
  std::size_t operator()(const GroupKey& k) const noexcept {
    std::uint64_t word = 0;  // digests are hash outputs: any 8 bytes are uniform
    std::memcpy(&word, k.digest.bytes.data(), sizeof(word));
    return static_cast<std::size_t>(word ^ (static_cast<std::uint64_t>(k.group) + 1) *
                                               0x9E3779B97F4A7C15ULL);
  }
};

/// A read of a candidate not asked yet: its unit position and what to ask.
struct Unknown {
  std::int64_t position;  // into Impl::ids
  std::int32_t group;
  std::int64_t digest_index;  // into Impl::digests
};

}  // namespace remote

struct RemoteLookup::Impl {
  Impl(const Coordinator& coordinator, const StoreLayout& layout, const RemoteOptions& opts);

  void require_done(const char* what) const {
    if (!done) {
      throw InvalidArgument(std::string("remote lookup: ") + what +
                            " before every round is answered");
    }
  }

  Coordinator coord;
  RemoteOptions options;
  bool worker = false;
  int num_groups = 0;
  bool fine = false;  // partial hits: every group's units are raw hashes

  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> bounds;       // max_length (batch) or token_len (worker) per request
  std::vector<std::int64_t> num_tokens;   // worker
  std::vector<std::uint8_t> apply_eagle;  // batch; empty = true

  std::vector<std::vector<std::string>> prefixes;  // [group][namespace] "...@group:g@"
  std::vector<std::int64_t> stride;                // [group] hashes per unit (1 when fine)
  std::vector<std::int64_t> slot_first;            // [r * G + g] -> first unit in ids
  std::vector<std::int64_t> slot_count;            // [r * G + g]
  std::vector<std::int32_t> ids;                   // per unit: candidate id or a sentinel

  std::vector<std::int32_t> cand_group;
  std::vector<BlockDigest> cand_digest;
  std::vector<std::uint8_t> cand_state;
  bool dedup = false;
  std::unordered_map<remote::GroupKey, std::int32_t, remote::GroupKeyHash> index;

  std::vector<std::int32_t> round_cands;  // candidates asked this round, in key order
  std::vector<std::string> pending;
  std::vector<std::uint8_t> finished;  // per request (multi_round)
  bool done = false;
  RemoteStats stats;

  std::size_t num_requests() const { return offsets.size() - 1; }

  span<const BlockDigest> request_hashes(std::size_t r) const {
    return span<const BlockDigest>(digests.data() + offsets[r],
                                   static_cast<std::size_t>(offsets[r + 1] - offsets[r]));
  }

  /// The unit of hash index `idx` for group g, or -1 when the finders never read it there.
  std::int64_t unit_of(int g, std::int64_t idx) const {
    const std::int64_t s = stride[static_cast<std::size_t>(g)];
    return (idx + 1) % s == 0 ? (idx + 1) / s - 1 : -1;
  }

  // Planning (remote_plan.cpp).

  /// The candidate slots of every (request, group): vLLM's candidate rule at each bound.
  void build_slots();

  /// Gives the unit at `position` (group g, digest index d) a candidate id; a new candidate
  /// (not seen in an earlier round or request) joins this round's keys.
  void assign(std::int64_t position, std::int32_t g, std::int64_t d);

  /// Asks every unasked candidate of request r in the groups `pick` accepts.
  template <class Pick>
  void force(std::size_t r, Pick pick);

  /// Builds this round's key strings from round_cands.
  void build_keys();

  /// multi_round: plans the next round from the lookups of unfinished requests.
  void plan_lazy();

  void start();

  // Reading the answers (remote.cpp).

  bool probe_unit(std::size_t r, int g, std::int64_t idx, bool& unknown,
                  std::vector<remote::Unknown>* record) const;

  /// One request's view of the answers; records reads of unasked candidates.
  class RequestSource;

  /// The whole batch's view (for the threaded CPU engine): the request from the hash pointer.
  class BatchSource;

  /// Runs request r's lookup(s) on what is known. Returns its hit length (worker mode) or 0, and
  /// sets `complete` when no unasked candidate was read.
  std::int64_t run(std::size_t r, std::vector<remote::Unknown>* record, bool& complete) const;
};

}  // namespace prefixhit
