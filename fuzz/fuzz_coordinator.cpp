// libFuzzer target: the coordinator with random configurations, stores, hash chains and lookups.
//
// The bytes decode into a configuration (mostly valid: block sizes are multiples of H and S a
// common multiple), a small pool of digests, request hash chains drawn from that pool (so equal
// digests recur at different positions and in different groups), a store, and lookups. Checked:
// * hit_length in [0, max_length] and a multiple of the lookup alignment A;
// * each group's list: 0 <= placeholders <= blocks, the same for every member of a spec group,
//   and consistent with the hit (SEMANTICS.md 4-5: the first full-attention spec group keeps
//   exactly ceil(hit/B) blocks, window / chunked-local / Mamba lists end at the hit);
// * the same lookup through BlockIndex::view(ns) equals the KeySet answer, while another
//   namespace of the same index holds every key (namespace isolation), and equals it again after
//   a save/load round trip of the index image;
// * the batch call equals the one-by-one calls, request by request;
// * store and lookup masks have end-start entries (or are "all") and reject unaligned lengths;
// * only the documented exception types occur, and the same one on every path.
// Any other exception, a crash or a sanitizer report aborts.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/index_file.hpp"

namespace {

using namespace prefixhit;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_coordinator: invariant violated: %s\n", what.c_str());
  std::abort();
}

void check(bool ok, const std::string& what) {
  if (!ok) {
    fail(what);
  }
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

Config decode_config(FuzzedDataProvider& in) {
  Config c;
  static constexpr std::int64_t kHashBlocks[] = {1, 2, 4, 8, 16};
  c.hash_block_size = in.PickValueInArray(kHashBlocks);
  const int groups = in.ConsumeIntegralInRange(1, 6);
  std::int64_t lcm = 1;
  for (int g = 0; g < groups; ++g) {
    GroupSpec spec;
    const auto kind = static_cast<GroupKind>(in.ConsumeIntegralInRange(0, 5));
    const std::int64_t b = c.hash_block_size * (std::int64_t{1} << in.ConsumeIntegralInRange(0, 3));
    const bool eagle = in.ConsumeBool();
    switch (kind) {
      case GroupKind::full_attention:
        spec = GroupSpec::full_attention(b, eagle);
        break;
      case GroupKind::mla_attention:
        spec = GroupSpec::mla_attention(b, eagle);
        break;
      case GroupKind::sliding_window:
        spec = GroupSpec::sliding_window_attention(
            b, in.ConsumeIntegralInRange<std::int64_t>(1, 4 * b), eagle);
        break;
      case GroupKind::sliding_window_mla:
        spec = GroupSpec::sliding_window_mla(b, in.ConsumeIntegralInRange<std::int64_t>(1, 4 * b),
                                             eagle);
        break;
      case GroupKind::chunked_local:
        spec =
            GroupSpec::chunked_local(b, b * in.ConsumeIntegralInRange<std::int64_t>(1, 4), eagle);
        break;
      case GroupKind::mamba:
        spec = GroupSpec::mamba(b, static_cast<MambaCacheMode>(in.ConsumeIntegralInRange(0, 2)),
                                eagle);
        break;
      case GroupKind::circular_buffer:  // not generated (pr49069 configurations)
        spec = GroupSpec::circular_buffer(b, eagle);
        break;
    }
    // A few distinct head counts so that equal-looking groups sometimes do not merge.
    spec.num_kv_heads += in.ConsumeIntegralInRange(0, 1);
    c.groups.push_back(spec);
    lcm = std::lcm(lcm, b);
  }
  c.scheduler_block_size = lcm * in.ConsumeIntegralInRange(1, 2);
  if (in.ConsumeIntegralInRange(0, 15) == 0) {
    c.scheduler_block_size += c.hash_block_size;  // sometimes not a common multiple: invalid
  }
  c.use_eagle = in.ConsumeBool();
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0:
      break;
    case 1:
      c.retention_interval = 0;
      break;
    default:
      c.retention_interval = c.hash_block_size * in.ConsumeIntegralInRange(1, 32);
  }
  return c;
}

/// The error kind of a call, or ok. Only prefixhit::Error is expected; anything else escapes.
template <class F>
ErrorKind outcome(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::ok;
}

bool lookup_error_allowed(ErrorKind kind) {
  return kind == ErrorKind::ok || kind == ErrorKind::unsupported_eagle_chunked_local ||
         kind == ErrorKind::unsupported_alignment_chunked_local ||
         kind == ErrorKind::unsupported_alignment_sliding_window;
}

std::string describe(const LookupResult& r) {
  std::string out = "hit " + std::to_string(r.hit_length) + " [";
  for (const GroupHit& g : r.groups) {
    out += "(" + std::to_string(g.num_blocks) + "," + std::to_string(g.num_placeholders) + ")";
  }
  return out + "]";
}

bool same(const LookupResult& a, const LookupResult& b) {
  if (a.hit_length != b.hit_length || a.groups.size() != b.groups.size()) {
    return false;
  }
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    if (a.groups[g].num_blocks != b.groups[g].num_blocks ||
        a.groups[g].num_placeholders != b.groups[g].num_placeholders) {
      return false;
    }
  }
  return true;
}

void check_result(const Coordinator& co, const LookupResult& r, std::int64_t max_length,
                  const std::string& what) {
  const std::int64_t a = co.lookup_alignment();
  const std::string ctx = what + ": " + describe(r) + " max_length " + std::to_string(max_length);
  check(r.hit_length >= 0 && r.hit_length <= max_length, "hit outside [0, max_length]: " + ctx);
  check(r.hit_length % a == 0, "hit not a multiple of A=" + std::to_string(a) + ": " + ctx);
  check(r.groups.size() == static_cast<std::size_t>(co.num_groups()), "wrong group count: " + ctx);
  const auto& sgs = co.spec_groups();
  for (std::size_t k = 0; k < sgs.size(); ++k) {
    const SpecGroup& sg = sgs[k];
    const GroupHit first = r.groups[static_cast<std::size_t>(sg.group_ids[0])];
    const std::int64_t b = sg.spec.block_size;
    check(first.num_placeholders >= 0 && first.num_placeholders <= first.num_blocks,
          "placeholders outside [0, blocks]: " + ctx);
    for (int id : sg.group_ids) {
      const GroupHit& h = r.groups[static_cast<std::size_t>(id)];
      check(h.num_blocks == first.num_blocks && h.num_placeholders == first.num_placeholders,
            "members of one spec group differ: " + ctx);
    }
    switch (sg.spec.kind) {
      case GroupKind::full_attention:
      case GroupKind::mla_attention:
        check(first.num_placeholders == 0, "full attention with placeholders: " + ctx);
        if (k == 0) {
          check(first.num_blocks == ceil_div(r.hit_length, b),
                "first full-attention group does not keep ceil(hit/B) blocks: " + ctx);
        } else {
          check(first.num_blocks * b >= r.hit_length, "full-attention list below the hit: " + ctx);
        }
        break;
      case GroupKind::sliding_window:
      case GroupKind::sliding_window_mla:
      case GroupKind::chunked_local:
        check(first.num_blocks * b == r.hit_length, "list does not end at the hit: " + ctx);
        break;
      case GroupKind::mamba:
        check(first.num_blocks == ceil_div(r.hit_length, b), "Mamba list length: " + ctx);
        check(first.num_blocks == 0 || first.num_placeholders == first.num_blocks - 1,
              "Mamba list is not placeholders then one loaded block: " + ctx);
        break;
      case GroupKind::circular_buffer:  // never in a spec group
        break;
    }
  }
}

void check_masks(const Coordinator& co, const std::vector<ChunkMask>& masks,
                 std::int64_t aligned_len, std::int64_t start_token) {
  check(masks.size() == co.config().groups.size(), "mask count differs from group count");
  for (std::size_t g = 0; g < masks.size(); ++g) {
    const std::int64_t b = co.config().groups[g].block_size;
    const ChunkMask& m = masks[g];
    const std::int64_t end = aligned_len / b;
    const std::int64_t start = std::min(end, ceil_div(start_token, b));
    check(m.end_chunk == end && m.first_chunk == start,
          "mask range of group " + std::to_string(g) + " is [" + std::to_string(m.first_chunk) +
              ", " + std::to_string(m.end_chunk) + "), expected [" + std::to_string(start) + ", " +
              std::to_string(end) + ")");
    if (m.keep) {
      check(static_cast<std::int64_t>(m.keep->size()) == end - start,
            "mask of group " + std::to_string(g) + " has " + std::to_string(m.keep->size()) +
                " entries, expected " + std::to_string(end - start));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const Config config = decode_config(in);
  std::optional<Coordinator> maybe;
  try {
    maybe.emplace(config);
  } catch (const InvalidConfig&) {
    return 0;
  }
  const Coordinator& co = *maybe;
  const std::int64_t h = co.config().hash_block_size;
  const std::int64_t a = co.lookup_alignment();

  // A small digest pool; pool entries differ only in one byte so that they share prefixes.
  const int pool_size = in.ConsumeIntegralInRange(1, 12);
  std::vector<BlockDigest> pool(static_cast<std::size_t>(pool_size));
  for (int i = 0; i < pool_size; ++i) {
    pool[static_cast<std::size_t>(i)].bytes[in.ConsumeIntegralInRange<std::size_t>(0, 31)] =
        static_cast<std::uint8_t>(i + 1);
  }
  // Requests: hash chains drawn from the pool.
  const int num_requests = in.ConsumeIntegralInRange(1, 4);
  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int64_t> max_lengths;
  std::vector<std::uint8_t> apply_eagle;
  for (int r = 0; r < num_requests; ++r) {
    const int n = in.ConsumeIntegralInRange(0, 48);
    for (int i = 0; i < n; ++i) {
      digests.push_back(pool[in.ConsumeIntegralInRange<std::size_t>(0, pool.size() - 1)]);
    }
    offsets.push_back(static_cast<std::int64_t>(digests.size()));
    max_lengths.push_back(in.ConsumeIntegralInRange<std::int64_t>(0, (n + 1) * h - 1));
    apply_eagle.push_back(in.ConsumeBool() ? 1 : 0);
  }

  // The store: a KeySet, and the same keys in namespace `ns` of a BlockIndex whose neighbouring
  // namespace holds every (group, pool digest) pair, so any namespace leak shows as a longer hit.
  const Namespace ns = in.ConsumeIntegralInRange<Namespace>(0, 3);
  const Namespace other = ns + 1;
  KeySet keys;
  BlockIndexOptions small;  // a few keys only: a large initial table would dominate the run time
  small.initial_capacity = 64;
  BlockIndex index(small);
  const int max_group = co.num_groups();  // one id past the configuration: never matches
  for (int g = 0; g <= max_group; ++g) {
    for (const BlockDigest& d : pool) {
      index.insert(other, g, span<const BlockDigest>(&d, 1));
    }
  }
  const int mode = in.ConsumeIntegralInRange(0, 2);
  for (int g = 0; g <= max_group; ++g) {
    for (std::size_t p = 0; p < pool.size(); ++p) {
      const bool present = mode == 0   ? true
                           : mode == 1 ? in.ConsumeBool()
                                       : in.ConsumeIntegralInRange(0, 3) != 0;
      if (present) {
        keys.insert(g, pool[p]);
        index.insert(ns, g, span<const BlockDigest>(&pool[p], 1));
      }
    }
  }
  // Persisted and reloaded, the index must answer exactly the same.
  const std::vector<std::uint8_t> image = serialize_index(index);
  BlockIndex reloaded(small);
  load_index_from_memory(image.data(), image.size(), reloaded);
  check(reloaded.size() == index.size(), "index image round trip changed the key count");

  const BlockIndex::View view = index.view(ns);
  const BlockIndex::View reloaded_view = reloaded.view(ns);
  std::vector<LookupResult> one_by_one;
  std::vector<ErrorKind> one_by_one_errors;
  for (int r = 0; r < num_requests; ++r) {
    const auto off = static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]);
    const auto n = static_cast<std::size_t>(offsets[static_cast<std::size_t>(r) + 1]) - off;
    const span<const BlockDigest> hashes(digests.data() + off, n);
    const std::int64_t max_length = max_lengths[static_cast<std::size_t>(r)];
    const bool eagle = apply_eagle[static_cast<std::size_t>(r)] != 0;
    const std::string what = "request " + std::to_string(r);
    LookupResult by_keys;
    LookupResult by_view;
    LookupResult by_reloaded;
    const ErrorKind e1 =
        outcome([&] { by_keys = co.find_longest_cache_hit(hashes, max_length, keys, eagle); });
    const ErrorKind e2 =
        outcome([&] { by_view = co.find_longest_cache_hit(hashes, max_length, view, eagle); });
    const ErrorKind e3 = outcome(
        [&] { by_reloaded = co.find_longest_cache_hit(hashes, max_length, reloaded_view, eagle); });
    check(lookup_error_allowed(e1), what + ": unexpected error kind " + to_string(e1));
    check(e1 == e2 && e1 == e3, what + ": KeySet / index view / reloaded index disagree on errors");
    if (e1 == ErrorKind::ok) {
      check_result(co, by_keys, max_length, what);
      check(same(by_keys, by_view), what + ": index view " + describe(by_view) + " != KeySet " +
                                        describe(by_keys) + " (namespace leak or false hit)");
      check(same(by_keys, by_reloaded), what + ": reloaded index differs from KeySet");
      // The receiver's mask for the decided hit (SEMANTICS.md 6).
      LookupResult load;
      const ErrorKind e4 = outcome([&] { load = co.load_mask(hashes, by_keys.hit_length); });
      check(lookup_error_allowed(e4), what + ": load_mask error " + to_string(e4));
      if (e4 == ErrorKind::ok) {
        check_result(co, load, by_keys.hit_length, what + " load_mask");
      }
    }
    one_by_one.push_back(by_keys);
    one_by_one_errors.push_back(e1);
    // A max_length past the hashes stops at the last hash or is an InvalidArgument (a finder
    // that would index past the list), never a read past the hash list.
    const ErrorKind e5 = outcome([&] {
      co.find_longest_cache_hit(hashes, static_cast<std::int64_t>(n + 1) * h, keys, eagle);
    });
    check(e5 == ErrorKind::invalid_argument || lookup_error_allowed(e5),
          what + ": max_length (n+1)*H gave " + to_string(e5));
  }

  // The batch call equals the one-by-one calls; on error, it is the first failing request's kind.
  LookupBatch batch;
  batch.digests = span<const BlockDigest>(digests);
  batch.offsets = span<const std::int64_t>(offsets);
  batch.max_lengths = span<const std::int64_t>(max_lengths);
  batch.apply_eagle = span<const std::uint8_t>(apply_eagle);
  BatchLookupResult batched;
  const ErrorKind eb = outcome([&] { batched = co.find_longest_cache_hits(batch, keys); });
  const auto first_error = std::find_if(one_by_one_errors.begin(), one_by_one_errors.end(),
                                        [](ErrorKind e) { return e != ErrorKind::ok; });
  if (first_error == one_by_one_errors.end()) {
    check(eb == ErrorKind::ok, std::string("batch failed with ") + to_string(eb) +
                                   " although every request succeeded alone");
    for (int r = 0; r < num_requests; ++r) {
      check(same(batched.request(static_cast<std::size_t>(r)),
                 one_by_one[static_cast<std::size_t>(r)]),
            "batch request " + std::to_string(r) + " differs from the one-by-one result");
    }
  } else {
    check(eb == *first_error, "batch error kind differs from the first failing request's");
  }

  // Store and lookup masks.
  const std::int64_t aligned = a * in.ConsumeIntegralInRange<std::int64_t>(0, 64);
  const std::int64_t start = in.ConsumeIntegralInRange<std::int64_t>(0, aligned + 2 * h);
  std::optional<std::int64_t> prompt;
  if (in.ConsumeBool()) {
    prompt = in.ConsumeIntegralInRange<std::int64_t>(0, aligned + 2 * h);
  }
  std::vector<ChunkMask> masks;
  check(outcome([&] { masks = co.store_mask(aligned, start, prompt); }) == ErrorKind::ok,
        "store_mask rejected an aligned length");
  check_masks(co, masks, aligned, start);
  check(outcome([&] { masks = co.lookup_mask(aligned); }) == ErrorKind::ok,
        "lookup_mask rejected an aligned length");
  check_masks(co, masks, aligned, 0);
  if (a > 1) {
    check(outcome([&] { co.store_mask(aligned + 1, 0, std::nullopt); }) ==
              ErrorKind::unaligned_length,
          "store_mask accepted an unaligned length");
  }
  check(co.align_lookup_length(aligned + a - 1) == aligned, "align_lookup_length");
  return 0;
}
