// Lookups with their probe set fetched up front (issue 14): record, answer together, replay.
#include <algorithm>
#include <utility>
#include <vector>

#include "host/probes.hpp"
#include "host/scratch_pool.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::detail {

namespace {

/// A window a finder asked for: spec group, first hash index, step, count; and, once the store
/// answered, its bits (every member group holds the key).
struct MemoEntry {
  std::int64_t first;
  std::int64_t step;
  std::uint64_t bits;
  int sg;
  int count;
  bool known;
};

/// The windows one lookup has asked for so far. Entries keep the finders' order, so a replay
/// usually finds its next window at `hint`.
struct LookupMemo {
  std::vector<MemoEntry> entries;
  std::size_t hint = 0;
  bool missed = false;  // this pass asked for a window without an answer
  bool done = false;
  bool confirmed = true;  // every guess of this pass came back "all present"

  /// The answer for a window if a known entry covers it (same spec group and step, the window
  /// inside the entry's run).
  bool answer(int sg, std::int64_t first, std::int64_t step, int count, std::uint64_t& bits) {
    if (hint < entries.size()) {
      const MemoEntry& e = entries[hint];
      if (e.known && e.sg == sg && e.first == first && e.step == step && e.count == count) {
        ++hint;
        bits = e.bits;
        return true;
      }
    }
    return answer_slow(sg, first, step, count, bits);
  }

  /// answer() away from the replay's order: a search of every known entry (out of line, so the
  /// finders' per-block loop stays small enough to inline).
  [[gnu::noinline]] bool answer_slow(int sg, std::int64_t first, std::int64_t step, int count,
                                     std::uint64_t& bits) {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const MemoEntry& e = entries[i];
      if (!e.known || e.sg != sg || e.step != step) {
        continue;
      }
      const std::int64_t offset = first - e.first;
      if (offset % step != 0) {
        continue;
      }
      const std::int64_t k0 = offset / step;
      if (k0 < 0 || k0 + count > e.count) {
        continue;
      }
      hint = i + 1;
      bits = (e.bits >> k0) & low_bits(count);
      return true;
    }
    return false;
  }

  bool recorded(int sg, std::int64_t first, std::int64_t step, int count) const {
    return std::any_of(entries.begin(), entries.end(), [&](const MemoEntry& e) {
      return !e.known && e.sg == sg && e.first == first && e.step == step && e.count == count;
    });
  }
};

/// The finders' Probe during a pass: answers from the memo; a window without an answer is
/// recorded and guessed all present (or, in the last pass, asked of the store directly).
struct MemoProbe {
  static constexpr int kFirstWindow = SourceProbe::kFirstWindow;
  static constexpr int kMaxWindow = SourceProbe::kMaxWindow;

  LookupMemo* memo;
  const SourceProbe* direct;
  bool last;  // the last pass asks the store directly

  std::uint64_t window(int sg, std::int64_t first, std::int64_t step, int count) const {
    // Narrow digests: a window over a hash with bytes past the width answers "absent" and marks
    // the lookup (SourceProbe::hashes_fit), before anything is recorded or asked.
    if (direct->plan->digest_size < static_cast<std::int32_t>(BlockDigest::kSize) &&
        direct->bad_digest != nullptr && !direct->hashes_fit(first, step, count)) {
      return 0;
    }
    std::uint64_t bits = 0;
    if (memo->answer(sg, first, step, count, bits)) {
      return bits;
    }
    return unanswered(sg, first, step, count);
  }

  [[gnu::noinline]] std::uint64_t unanswered(int sg, std::int64_t first, std::int64_t step,
                                             int count) const {
    if (last) {
      return direct->window(sg, first, step, count);
    }
    memo->missed = true;
    if (!memo->recorded(sg, first, step, count)) {
      memo->entries.push_back(MemoEntry{first, step, 0, sg, count, false});
    }
    return low_bits(count);
  }
};

/// A lookup's working memory: the memos, the windows of a pass, their answers and, for each
/// window, the (lookup, memo entry) it answers.
struct Scratch {
  std::vector<LookupMemo> memos;
  std::vector<ProbeWindow> windows;
  std::vector<std::uint64_t> answers;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> owners;
};

/// Passes before the rest is probed directly. dsv4-flash needs two on a full store (record,
/// replay) and three around a hole.
constexpr int kMaxPasses = 4;

void run_planned_lookups_on(const LookupPlan& plan, const ExistenceSource& store,
                            PlannedLookup* lookups, std::size_t count) {
  if (!store.prefers_probe_many()) {
    for (std::size_t r = 0; r < count; ++r) {
      const PlannedLookup& lookup = lookups[r];
      const SourceProbe probe{&plan, &store, lookup.hashes, lookup.bad_digest};
      *lookup.error = find_longest_cache_hit(plan, lookup.n, lookup.max_length, lookup.apply_eagle,
                                             probe, lookup.hits, *lookup.hit_length);
      if (lookup.bad_digest != nullptr && *lookup.bad_digest >= 0) {
        *lookup.error = ErrorKind::invalid_argument;  // the caller names the hash
      }
    }
    return;
  }
  // Buffers reused across lookups and threads; a lookup started from inside a store's
  // probe_many (a Python callback source may do that) takes another one.
  static ScratchPool<Scratch> pool;
  const ScratchPool<Scratch>::Lease lease = pool.lease();
  Scratch& scratch = *lease;
  std::vector<LookupMemo>& memos = scratch.memos;
  std::vector<ProbeWindow>& windows = scratch.windows;
  std::vector<std::uint64_t>& answers = scratch.answers;
  std::vector<std::pair<std::uint32_t, std::uint32_t>>& owners = scratch.owners;
  if (memos.size() < count) {
    memos.resize(count);
  }
  for (std::size_t r = 0; r < count; ++r) {
    memos[r].entries.clear();
    memos[r].done = false;
  }
  for (int pass = 0;; ++pass) {
    const bool last = pass + 1 >= kMaxPasses;
    windows.clear();
    owners.clear();
    for (std::size_t r = 0; r < count; ++r) {
      LookupMemo& memo = memos[r];
      if (memo.done) {
        continue;
      }
      const PlannedLookup& lookup = lookups[r];
      const SourceProbe direct{&plan, &store, lookup.hashes, lookup.bad_digest};
      memo.hint = 0;
      memo.missed = false;
      memo.confirmed = true;
      const std::size_t before = memo.entries.size();
      const MemoProbe probe{&memo, &direct, last};
      *lookup.error = find_longest_cache_hit(plan, lookup.n, lookup.max_length, lookup.apply_eagle,
                                             probe, lookup.hits, *lookup.hit_length);
      if (lookup.bad_digest != nullptr && *lookup.bad_digest >= 0) {
        *lookup.error = ErrorKind::invalid_argument;  // the caller names the hash
        memo.done = true;
        continue;
      }
      if (!memo.missed) {
        memo.done = true;  // every window came from the store: this is the exact answer
        continue;
      }
      for (std::size_t e = before; e < memo.entries.size(); ++e) {
        const MemoEntry& entry = memo.entries[e];
        const SpecGroupPlan& spec = plan.spec_groups[entry.sg];
        for (int m = 0; m < spec.num_members; ++m) {
          windows.push_back(ProbeWindow{lookup.hashes, entry.first, entry.step,
                                        plan.members[spec.first_member + m], entry.count});
          owners.emplace_back(static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(e));
        }
      }
    }
    if (windows.empty()) {
      return;
    }
    answers.resize(windows.size());
    store.probe_many(windows.data(), windows.size(), answers.data());
    for (std::size_t w = 0; w < windows.size(); ++w) {
      LookupMemo& memo = memos[owners[w].first];
      MemoEntry& entry = memo.entries[owners[w].second];
      const std::uint64_t all = low_bits(entry.count);
      entry.bits = entry.known ? (entry.bits & answers[w]) : (all & answers[w]);
      entry.known = true;
      memo.confirmed = memo.confirmed && (answers[w] & all) == all;
    }
    // A pass whose guesses all came back "present" saw exactly the bits a replay would see, so
    // it took the replay's path and its result is already the exact one (a full store: one
    // finder run, not two).
    for (std::size_t r = 0; r < count; ++r) {
      LookupMemo& memo = memos[r];
      memo.done = memo.done || memo.confirmed;
    }
  }
}

}  // namespace

void run_planned_lookups(const LookupPlan& plan, const ExistenceSource& store,
                         PlannedLookup* lookups, std::size_t count) {
  // One run_lookup per call: a View takes its lock once for the whole set of lookups.
  bool ran = false;
  store.run_lookup([&](const ExistenceSource& source) {
    run_planned_lookups_on(plan, source, lookups, count);
    ran = true;
  });
  if (!ran) {  // else every answer would be the untouched "no hit"
    throw InvalidArgument("ExistenceSource::run_lookup returned without running the lookup");
  }
}

}  // namespace prefixhit::detail
