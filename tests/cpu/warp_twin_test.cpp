// The portable twin of the GPU warp probe (detail/warp_probe.hpp) against the CPU engine.
//
// The kernel runs detail::lookup_request over a WarpProbe; here the very same code runs on the
// host, where the probe answers its 32/64-key windows lane by lane instead of with a ballot. On
// fresh random configurations (every group kind and every configuration shape of the vectors),
// stores (full, empty, prefixes, random holes, holes at window boundaries, store-mask round
// trips, fine-grained raw hashes, junk entries) and unaligned max_lengths, every row it writes
// must equal Coordinator::find_longest_cache_hit (or carry the same error kind and zeros).
// Both existence sources are covered: a KeySet probed key by key, as the device index is, and
// the presence table a remote store's KeyPlan answers are scattered into.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/warp_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/gpu.hpp"

namespace {

using prefixhit::BlockDigest;
using prefixhit::Config;
using prefixhit::Coordinator;
using prefixhit::ErrorKind;
using prefixhit::GroupKind;
using prefixhit::GroupSpec;
using prefixhit::KeySet;
using prefixhit::LookupResult;
using prefixhit::MambaCacheMode;
using prefixhit::span;

// ---- random configurations, requests and stores ----------------------------------------------
// (Mirrored in tests/gpu/batch_lookup_test.cu, which runs the same kinds of cases on a device.)

/// A fresh seed per run, or PREFIXHIT_TEST_SEED to replay a failure.
std::uint64_t fresh_seed() {
  if (const char* env = std::getenv("PREFIXHIT_TEST_SEED")) {
    return std::strtoull(env, nullptr, 0);
  }
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  /// Uniform in [lo, hi].
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(gen_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(gen_); }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(items.size()) - 1))];
  }
  std::uint64_t bits() { return gen_(); }

 private:
  std::mt19937_64 gen_;
};

/// The configuration families of the vectors (SEMANTICS.md 9).
enum class Shape { single, simple_hybrid, multi_group, dsv4, mamba_hybrid, chunked_local, mixed };
constexpr int kNumShapes = 7;
const char* shape_name(Shape shape) {
  static const char* const kNames[] = {"single",       "simple_hybrid", "multi_group", "dsv4",
                                       "mamba_hybrid", "chunked_local", "mixed"};
  return kNames[static_cast<int>(shape)];
}

/// H times a divisor of S/H: a block size every rule of SEMANTICS.md 1.1 accepts.
std::int64_t random_block(Rng& rng, std::int64_t h, std::int64_t s) {
  std::vector<std::int64_t> divisors;
  for (std::int64_t d = 1; d <= s / h; ++d) {
    if ((s / h) % d == 0) {
      divisors.push_back(d);
    }
  }
  return h * rng.pick(divisors);
}

GroupSpec random_spec(Rng& rng, GroupKind kind, std::int64_t h, std::int64_t s) {
  const std::int64_t b = random_block(rng, h, s);
  const bool eagle = rng.chance(0.25);
  GroupSpec spec;
  switch (kind) {
    case GroupKind::full_attention:
      spec = GroupSpec::full_attention(b, eagle);
      if (rng.chance(0.1)) {
        spec.sliding_window = rng.uniform(1, 4 * s);  // inert for lookups, changes equality
      }
      break;
    case GroupKind::mla_attention:
      spec = GroupSpec::mla_attention(b, eagle);
      break;
    case GroupKind::sliding_window:
    case GroupKind::sliding_window_mla: {
      const std::int64_t window = rng.pick(std::vector<std::int64_t>{
          1, b, b + 1, 2 * b, 2 * b - 1, 3 * b, s, s + 1, 2 * s, rng.uniform(1, 4 * s)});
      spec = kind == GroupKind::sliding_window
                 ? GroupSpec::sliding_window_attention(b, window, eagle)
                 : GroupSpec::sliding_window_mla(b, window, eagle);
      break;
    }
    case GroupKind::chunked_local: {
      const std::int64_t chunk =
          rng.pick(std::vector<std::int64_t>{b, 2 * b, 4 * b, s, 2 * s, rng.uniform(1, 4 * s)});
      spec = GroupSpec::chunked_local(b, chunk, rng.chance(0.1));
      break;
    }
    case GroupKind::mamba:
      spec = GroupSpec::mamba(
          b,
          rng.pick(std::vector<MambaCacheMode>{MambaCacheMode::align, MambaCacheMode::align,
                                               MambaCacheMode::all, MambaCacheMode::none}),
          eagle);
      spec.state_dim = rng.uniform(1, 2);
      return spec;
  }
  spec.num_kv_heads += rng.uniform(0, 1);  // two specs of one kind may or may not merge
  return spec;
}

Config random_config(Rng& rng, Shape shape) {
  Config c;
  c.use_eagle = rng.chance(0.5);
  c.hash_block_size = rng.pick(std::vector<std::int64_t>{1, 2, 4, 8, 16, 32});
  c.scheduler_block_size =
      c.hash_block_size * rng.pick(std::vector<std::int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 64});
  const std::int64_t h = c.hash_block_size;
  const std::int64_t s = c.scheduler_block_size;
  auto add = [&](GroupKind kind) { c.groups.push_back(random_spec(rng, kind, h, s)); };
  const std::vector<GroupKind> windows = {GroupKind::sliding_window, GroupKind::sliding_window_mla};
  const std::vector<GroupKind> fulls = {GroupKind::full_attention, GroupKind::mla_attention};
  const std::vector<GroupKind> all = {GroupKind::full_attention, GroupKind::mla_attention,
                                      GroupKind::sliding_window, GroupKind::sliding_window_mla,
                                      GroupKind::chunked_local,  GroupKind::mamba};
  switch (shape) {
    case Shape::single:
      add(rng.pick(all));
      break;
    case Shape::simple_hybrid:
      add(rng.pick(fulls));
      add(rng.pick(std::vector<GroupKind>{GroupKind::sliding_window, GroupKind::sliding_window_mla,
                                          GroupKind::mamba, GroupKind::chunked_local}));
      break;
    case Shape::multi_group: {
      const auto groups = rng.uniform(3, 6);
      if (rng.chance(0.7)) {
        add(rng.pick(fulls));
      }
      while (static_cast<std::int64_t>(c.groups.size()) < groups) {
        add(rng.chance(0.7) ? rng.pick(windows) : rng.pick(fulls));
      }
      break;
    }
    case Shape::dsv4: {
      const bool mla = rng.chance(0.3);
      c.hash_block_size = 4;
      c.scheduler_block_size = 256;
      auto window = [&](std::int64_t b, std::int64_t w, bool eagle) {
        return mla ? GroupSpec::sliding_window_mla(b, w, eagle)
                   : GroupSpec::sliding_window_attention(b, w, eagle);
      };
      c.groups = {mla ? GroupSpec::mla_attention(256) : GroupSpec::full_attention(256),
                  window(64, 128, false), window(64, 128, rng.chance(0.8)), window(4, 8, false),
                  window(8, 128, false)};
      c.use_eagle = rng.chance(0.8);
      break;
    }
    case Shape::mamba_hybrid: {
      add(GroupKind::mamba);
      if (rng.chance(0.8)) {
        add(rng.pick(fulls));
      }
      const auto extra = rng.uniform(0, 2);
      for (std::int64_t i = 0; i < extra; ++i) {
        add(rng.pick(std::vector<GroupKind>{GroupKind::sliding_window, GroupKind::mamba,
                                            GroupKind::full_attention}));
      }
      break;
    }
    case Shape::chunked_local: {
      add(GroupKind::chunked_local);
      const auto extra = rng.uniform(0, 2);
      for (std::int64_t i = 0; i < extra; ++i) {
        add(rng.pick(std::vector<GroupKind>{GroupKind::full_attention, GroupKind::sliding_window,
                                            GroupKind::chunked_local}));
      }
      break;
    }
    case Shape::mixed: {
      const auto groups = rng.uniform(1, 7);
      for (std::int64_t i = 0; i < groups; ++i) {
        add(rng.pick(all));
      }
      break;
    }
  }
  // Merged groups: copies of an earlier spec (possibly with another EAGLE flag).
  const auto copies = rng.chance(0.4) ? rng.uniform(1, 2) : 0;
  for (std::int64_t i = 0; i < copies && c.groups.size() < 8; ++i) {
    GroupSpec copy = c.groups[static_cast<std::size_t>(
        rng.uniform(0, static_cast<std::int64_t>(c.groups.size()) - 1))];
    copy.eagle = rng.chance(0.5);
    c.groups.push_back(copy);
  }
  // Shuffled ids (full attention is not always group 0).
  if (rng.chance(0.5)) {
    for (std::size_t i = c.groups.size(); i > 1; --i) {
      std::swap(
          c.groups[i - 1],
          c.groups[static_cast<std::size_t>(rng.uniform(0, static_cast<std::int64_t>(i) - 1))]);
    }
  }
  return c;
}

BlockDigest random_digest(Rng& rng) {
  BlockDigest d;
  for (std::size_t w = 0; w < 4; ++w) {
    const std::uint64_t word = rng.bits();
    for (std::size_t b = 0; b < 8; ++b) {
      d.bytes[8 * w + b] = static_cast<std::uint8_t>(word >> (8 * b));
    }
  }
  return d;
}

/// One request: hashes and an (often unaligned) max_length in [0, (n+1)*H).
struct Request {
  std::vector<BlockDigest> hashes;
  std::int64_t max_length = 0;
  bool apply_eagle = true;
};

Request random_request(Rng& rng, const Coordinator& coordinator) {
  const Config& c = coordinator.config();
  const std::int64_t h = c.hash_block_size;
  std::int64_t s_max = 1;
  for (const GroupSpec& g : c.groups) {
    s_max = std::max(s_max, g.block_size / h);
  }
  // Mostly short requests; some long enough for several 64-block windows of every group.
  const double roll = static_cast<double>(rng.uniform(0, 99));
  std::int64_t n = roll < 50   ? rng.uniform(0, 3 * s_max + 5)
                   : roll < 85 ? rng.uniform(0, 70 * s_max)
                               : rng.uniform(64 * s_max, 200 * s_max);
  n = std::min<std::int64_t>(n, 12000);
  Request req;
  req.hashes.resize(static_cast<std::size_t>(n));
  for (BlockDigest& d : req.hashes) {
    d = random_digest(rng);
  }
  const std::int64_t top = (n + 1) * h - 1;
  const std::int64_t a = coordinator.lookup_alignment();
  std::int64_t m = 0;
  switch (rng.uniform(0, 5)) {
    case 0:
      m = rng.uniform(0, top);
      break;
    case 1:
      m = top;
      break;
    case 2:
      m = n * h;
      break;
    case 3:
      m = std::min(top, coordinator.align_lookup_length(rng.uniform(0, top)) + rng.uniform(0, 1));
      break;
    case 4: {
      const std::int64_t b = c.groups[static_cast<std::size_t>(rng.uniform(
                                          0, static_cast<std::int64_t>(c.groups.size()) - 1))]
                                 .block_size;
      m = std::clamp<std::int64_t>((rng.uniform(0, top) / b) * b + rng.uniform(-1, 1), 0, top);
      break;
    }
    default:
      m = std::max<std::int64_t>(0, std::min(top, rng.uniform(0, top) / a * a - 1));
      break;
  }
  req.max_length = m;
  req.apply_eagle = rng.chance(0.8);
  return req;
}

/// Store contents for one request, built like the vectors' exists strategies.
KeySet random_store(Rng& rng, const Coordinator& coordinator, const Request& req) {
  const Config& c = coordinator.config();
  const std::int64_t h = c.hash_block_size;
  const auto n = static_cast<std::int64_t>(req.hashes.size());
  const int g_count = static_cast<int>(c.groups.size());
  KeySet store;
  const int strategy = static_cast<int>(rng.uniform(0, 7));
  const double hole_p = rng.pick(std::vector<double>{0.5, 0.8, 0.95, 0.99});
  const std::int64_t cut = rng.uniform(0, n + 1);
  const int boundary_rule = static_cast<int>(rng.uniform(0, 3));
  const double fine_p = rng.pick(std::vector<double>{0.0, 0.1, 0.5, 1.0});
  std::vector<prefixhit::ChunkMask> masks;
  if (strategy == 7) {
    const std::int64_t aligned = coordinator.align_lookup_length(n * h);
    std::optional<std::int64_t> prompt;
    if (rng.chance(0.7)) {
      prompt = rng.uniform(0, n * h + 1);
    }
    masks = coordinator.store_mask(aligned, 0, prompt);
  }
  for (int g = 0; g < g_count; ++g) {
    const std::int64_t s = c.groups[static_cast<std::size_t>(g)].block_size / h;
    const std::int64_t blocks = n / s;
    const std::int64_t group_cut = rng.uniform(0, blocks + 1);
    for (std::int64_t i = 0; i < n; ++i) {
      const bool boundary = (i + 1) % s == 0;
      bool present = false;
      if (!boundary) {
        present = rng.chance(fine_p);  // raw hashes: only fine-grained probes read them
      } else {
        const std::int64_t j = (i + 1) / s - 1;
        switch (strategy) {
          case 0:  // full
            present = true;
            break;
          case 1:  // empty
            present = false;
            break;
          case 2:  // prefix (same token cut for every group)
            present = i < cut;
            break;
          case 3:  // per-group prefix
            present = j < group_cut;
            break;
          case 4:  // random holes
            present = rng.chance(hole_p);
            break;
          case 5: {  // holes at window boundaries, counted from either end
            const std::int64_t back = blocks - 1 - j;
            const bool edge32 = j % 32 == 0 || j % 32 == 31;
            const bool edge64 = j % 64 == 0 || j % 64 == 63;
            const bool back32 = back % 32 == 0 || back % 32 == 31;
            present = !(boundary_rule == 0   ? edge32
                        : boundary_rule == 1 ? edge64
                        : boundary_rule == 2 ? back32
                                             : (edge64 || back32)) ||
                      rng.chance(0.3);
            break;
          }
          case 6:  // sparse tail
            present = j < group_cut || rng.chance(0.2);
            break;
          default:  // what store_mask writes
            present = masks[static_cast<std::size_t>(g)].contains(j);
            break;
        }
      }
      if (present) {
        store.insert(g, req.hashes[static_cast<std::size_t>(i)]);
      }
    }
  }
  // Junk that must never match: unknown group ids and foreign digests.
  if (rng.chance(0.3)) {
    for (int k = 0; k < 4; ++k) {
      store.insert(g_count + k, n > 0 ? req.hashes[static_cast<std::size_t>(rng.uniform(0, n - 1))]
                                      : random_digest(rng));
      store.insert(static_cast<int>(rng.uniform(0, g_count - 1)), random_digest(rng));
    }
  }
  return store;
}

// ---- the twin -------------------------------------------------------------------------------

/// The key-by-key source the device index gives a warp, over a KeySet; counts any index the
/// finders ask for outside the hash list (there must be none).
struct KeySetSource {
  const KeySet* store;
  const BlockDigest* hashes;
  std::int64_t n;
  int* out_of_range;

  bool contains(int group_id, std::int64_t index) const {
    if (index < 0 || index >= n) {
      ++*out_of_range;
      return false;
    }
    return store->contains(group_id, hashes[index]);
  }
  /// As the device index source, the probe hints each key first (has_prefetch): the hint must
  /// stay inside the request too, since the device turns it into a load.
  void prefetch(std::int64_t index) const {
    if (index < 0 || index >= n) {
      ++*out_of_range;
    }
  }
};
static_assert(prefixhit::detail::has_prefetch<KeySetSource>::value &&
                  !prefixhit::detail::has_prefetch<prefixhit::detail::PresenceTableSource>::value,
              "the twin covers both probe paths");

/// A batch's output arrays on the host, poisoned so that an unwritten entry shows.
struct Outputs {
  static constexpr std::int64_t kPoison = -0x5A5A5A5A5A5A5A5ALL;
  static constexpr ErrorKind kPoisonStatus = static_cast<ErrorKind>(0xEE);

  Outputs(std::size_t requests, int groups)
      : hit_lengths(requests, kPoison),
        num_blocks(requests * static_cast<std::size_t>(groups), kPoison),
        num_placeholders(requests * static_cast<std::size_t>(groups), kPoison),
        status(requests, kPoisonStatus) {}

  prefixhit::detail::RequestOutputs view() {
    return {hit_lengths.data(), num_blocks.data(), num_placeholders.data(), status.data()};
  }

  std::vector<std::int64_t> hit_lengths;
  std::vector<std::int64_t> num_blocks;
  std::vector<std::int64_t> num_placeholders;
  std::vector<ErrorKind> status;
};

/// The CPU engine's answer: a result, or the error kind it throws.
struct Expected {
  std::optional<LookupResult> result;
  ErrorKind error = ErrorKind::ok;
};

template <class Fn>
Expected expect_from(const Fn& fn) {
  Expected e;
  try {
    e.result = fn();
  } catch (const prefixhit::Error& err) {
    e.error = err.kind();
  }
  return e;
}

/// Row r of `out` against the CPU engine's answer.
::testing::AssertionResult row_matches(const Outputs& out, std::size_t r, int groups,
                                       const Expected& expected) {
  const auto g = static_cast<std::size_t>(groups);
  if (out.status[r] != expected.error) {
    return ::testing::AssertionFailure() << "status " << static_cast<int>(out.status[r]) << " ("
                                         << prefixhit::to_string(out.status[r]) << "), expected "
                                         << prefixhit::to_string(expected.error);
  }
  const std::int64_t want_hit = expected.result ? expected.result->hit_length : 0;
  if (out.hit_lengths[r] != want_hit) {
    return ::testing::AssertionFailure()
           << "hit_length " << out.hit_lengths[r] << ", expected " << want_hit;
  }
  for (std::size_t gid = 0; gid < g; ++gid) {
    const prefixhit::GroupHit want =
        expected.result ? expected.result->groups[gid] : prefixhit::GroupHit{};
    if (out.num_blocks[r * g + gid] != want.num_blocks ||
        out.num_placeholders[r * g + gid] != want.num_placeholders) {
      return ::testing::AssertionFailure()
             << "group " << gid << ": (" << out.num_blocks[r * g + gid] << " blocks, "
             << out.num_placeholders[r * g + gid] << " placeholders), expected (" << want.num_blocks
             << ", " << want.num_placeholders << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

std::string describe(const Config& c, Shape shape, const Request& req) {
  std::string out = std::string("shape ") + shape_name(shape) +
                    ", H=" + std::to_string(c.hash_block_size) +
                    " S=" + std::to_string(c.scheduler_block_size) +
                    " use_eagle=" + (c.use_eagle ? "1" : "0") + " groups [";
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    const GroupSpec& spec = c.groups[g];
    out += (g ? ", " : "") + std::string(prefixhit::to_string(spec.kind)) + "(" +
           std::to_string(spec.block_size);
    if (spec.sliding_window) {
      out += " w=" + std::to_string(*spec.sliding_window);
    }
    if (spec.attention_chunk_size) {
      out += " chunk=" + std::to_string(*spec.attention_chunk_size);
    }
    if (spec.kind == GroupKind::mamba) {
      out += std::string(" ") + prefixhit::to_string(spec.mamba_cache_mode);
    }
    out += spec.eagle ? " eagle)" : ")";
  }
  return out + "], n=" + std::to_string(req.hashes.size()) +
         " max_length=" + std::to_string(req.max_length) +
         " apply_eagle=" + (req.apply_eagle ? "1" : "0");
}

template <int First, int Max, int Ahead>
using KeySetWarpProbe = prefixhit::detail::WarpProbe<KeySetSource, First, Max, Ahead>;
template <int First, int Max, int Ahead>
using TableWarpProbe =
    prefixhit::detail::WarpProbe<prefixhit::detail::PresenceTableSource, First, Max, Ahead>;

static_assert(
    std::is_same_v<
        prefixhit::detail::KernelWarpProbe<KeySetSource, prefixhit::detail::kIndexLookahead>,
        KeySetWarpProbe<32, 64, 0>> &&
        std::is_same_v<prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                                          prefixhit::detail::kPresenceLookahead>,
                       TableWarpProbe<32, 64, 3>>,
    "KernelWindowsMatchCpuEngine must test the kernels' probe configurations");

/// Runs `configs` random configurations through the twin with window sizes First/Max, and
/// KeyAhead / TableAhead lookahead windows for the key-by-key and the presence-table sources.
template <int First, int Max, int KeyAhead, int TableAhead>
void run_twin(int configs, int requests_per_config) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) +
               " (replay: PREFIXHIT_TEST_SEED=" + std::to_string(seed) + ")");
  Rng rng(seed);
  std::array<int, kNumShapes> shapes_seen{};
  std::array<int, 6> kinds_seen{};
  int errors_seen = 0;
  int partial_seen = 0;
  int failures = 0;
  for (int k = 0; k < configs && failures < 5; ++k) {
    const auto shape = static_cast<Shape>(k % kNumShapes);
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(random_config(rng, shape));
    } catch (const prefixhit::InvalidConfig&) {
      continue;  // the generator only builds valid block sizes; S-free rules may still reject
    }
    ++shapes_seen[static_cast<std::size_t>(shape)];
    for (const GroupSpec& spec : coordinator->config().groups) {
      ++kinds_seen[static_cast<std::size_t>(spec.kind)];
    }
    partial_seen += coordinator->enable_partial_hash_hits() ? 1 : 0;
    const prefixhit::detail::LookupPlan& plan = coordinator->plan();
    const int groups = plan.num_groups;
    Outputs keyset_out(static_cast<std::size_t>(requests_per_config), groups);
    Outputs table_out(static_cast<std::size_t>(requests_per_config), groups);
    for (int r = 0; r < requests_per_config && failures < 5; ++r) {
      const Request req = random_request(rng, *coordinator);
      const KeySet store = random_store(rng, *coordinator, req);
      const auto n = static_cast<std::int64_t>(req.hashes.size());
      const auto row = static_cast<std::size_t>(r);
      SCOPED_TRACE(describe(coordinator->config(), shape, req));

      // Source 1: key by key over the store, as the device index answers.
      const Expected want = expect_from([&] {
        return coordinator->find_longest_cache_hit(req.hashes, req.max_length, store,
                                                   req.apply_eagle);
      });
      errors_seen += want.error != ErrorKind::ok ? 1 : 0;
      int out_of_range = 0;
      const KeySetWarpProbe<First, Max, KeyAhead> probe{
          &plan, KeySetSource{&store, req.hashes.data(), n, &out_of_range}, n};
      prefixhit::detail::lookup_request(plan, n, req.max_length, req.apply_eagle, probe, r, 0, 1,
                                        keyset_out.view());
      EXPECT_EQ(out_of_range, 0) << "the finders asked for hash indices outside the request";
      failures += out_of_range == 0 ? 0 : 1;
      const auto keyset_ok = row_matches(keyset_out, row, groups, want);
      EXPECT_TRUE(keyset_ok) << "key-by-key source";

      // Source 2: the presence table from the request's KeyPlan answers.
      const prefixhit::KeyPlan key_plan = coordinator->key_plan(req.hashes, req.max_length);
      std::vector<std::uint8_t> answers(key_plan.size());
      for (std::size_t i = 0; i < key_plan.size(); ++i) {
        answers[i] = store.contains(key_plan.group_ids[i], key_plan.keys[i]) ? 1 : 0;
      }
      const prefixhit::PlanAnswers plan_answers(key_plan, answers, groups);
      const Expected want_plan = expect_from([&] {
        return coordinator->find_longest_cache_hit(req.hashes, req.max_length, plan_answers,
                                                   req.apply_eagle);
      });
      std::vector<std::uint8_t> table(static_cast<std::size_t>(groups * n) + 1, 0);
      prefixhit::gpu::scatter_plan_answers(key_plan, answers, groups, table.data());
      const TableWarpProbe<First, Max, TableAhead> table_probe{
          &plan, prefixhit::detail::PresenceTableSource{table.data(), n}, n};
      prefixhit::detail::lookup_request(plan, n, req.max_length, req.apply_eagle, table_probe, r, 0,
                                        1, table_out.view());
      const auto table_ok = row_matches(table_out, row, groups, want_plan);
      EXPECT_TRUE(table_ok) << "presence-table source";
      failures += (keyset_ok && table_ok) ? 0 : 1;
    }
  }
  // The generator must keep covering what this test claims to cover.
  for (int s = 0; s < kNumShapes; ++s) {
    EXPECT_GT(shapes_seen[static_cast<std::size_t>(s)], 0)
        << "no valid configuration of shape " << shape_name(static_cast<Shape>(s));
  }
  for (int kind = 0; kind < 6; ++kind) {
    EXPECT_GT(kinds_seen[static_cast<std::size_t>(kind)], 0)
        << "no group of kind " << prefixhit::to_string(static_cast<GroupKind>(kind));
  }
  EXPECT_GT(errors_seen, 0) << "no lookup error was exercised";
  EXPECT_GT(partial_seen, 0) << "no configuration with partial hash hits";
}

/// The kernels' configurations (KernelWarpProbe): 32-key first windows, then 64-key windows;
/// lookahead 0 for the device index, 3 for presence tables.
TEST(WarpTwin, KernelWindowsMatchCpuEngine) {
  run_twin<32, 64, prefixhit::detail::kIndexLookahead, prefixhit::detail::kPresenceLookahead>(420,
                                                                                              12);
}

TEST(WarpTwin, OneKeyPerLaneWindowsMatchCpuEngine) {
  run_twin<32, 32, 0, 1>(140, 12);
}

TEST(WarpTwin, SwappedLookaheadsMatchCpuEngine) {
  run_twin<32, 64, 3, 0>(140, 12);
}

TEST(WarpTwin, SmallFirstWindowsAndOtherLookaheadsMatchCpuEngine) {
  run_twin<8, 32, 7, 15>(70, 12);
  run_twin<16, 64, 1, 2>(70, 12);
}

TEST(WarpTwin, LoadMaskThroughAllOnesTableMatchesCpu) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int k = 0; k < 200; ++k) {
    const auto shape = static_cast<Shape>(k % kNumShapes);
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(random_config(rng, shape));
    } catch (const prefixhit::InvalidConfig&) {
      continue;
    }
    const prefixhit::detail::LookupPlan& plan = coordinator->plan();
    const Request req = random_request(rng, *coordinator);
    const auto n = static_cast<std::int64_t>(req.hashes.size());
    SCOPED_TRACE(describe(coordinator->config(), shape, req));
    const Expected want =
        expect_from([&] { return coordinator->load_mask(req.hashes, req.max_length); });
    const std::vector<std::uint8_t> ones(static_cast<std::size_t>(plan.num_groups * n) + 1, 1);
    Outputs out(1, plan.num_groups);
    const prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                             prefixhit::detail::kPresenceLookahead>
        probe{&plan, prefixhit::detail::PresenceTableSource{ones.data(), n}, n};
    prefixhit::detail::lookup_request(plan, n, req.max_length, false, probe, 0, 0, 1, out.view());
    ASSERT_TRUE(row_matches(out, 0, plan.num_groups, want));
  }
}

/// The probe alone, on arbitrary sequences of windows: walks that continue (served from the
/// lookahead), walks abandoned midway, the same spec group and step restarting elsewhere, and
/// windows cut short. Every answer must equal the member AND of the table, key by key.
TEST(WarpTwin, ProbeAnswersAnySequenceOfWindows) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int k = 0; k < 60; ++k) {
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(random_config(rng, static_cast<Shape>(k % kNumShapes)));
    } catch (const prefixhit::InvalidConfig&) {
      continue;
    }
    const prefixhit::detail::LookupPlan& plan = coordinator->plan();
    const std::int64_t n = rng.uniform(1, 2000);
    const double density = rng.pick(std::vector<double>{0.5, 0.9, 1.0});
    std::vector<std::uint8_t> table(static_cast<std::size_t>(plan.num_groups * n));
    for (std::uint8_t& cell : table) {
      cell = rng.chance(density) ? 1 : 0;
    }
    const prefixhit::detail::PresenceTableSource source{table.data(), n};
    const prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                             prefixhit::detail::kPresenceLookahead>
        probe{&plan, source, n};
    int sg = 0;
    std::int64_t first = 0;
    std::int64_t step = 1;
    int count = 0;
    for (int call = 0; call < 400; ++call) {
      const bool restart = count == 0 || rng.chance(0.3);
      if (restart) {
        // Often the same spec group and step as before, from somewhere else.
        if (rng.chance(0.5)) {
          sg = static_cast<int>(rng.uniform(0, plan.num_spec_groups - 1));
          step = rng.pick(std::vector<std::int64_t>{1, -1, 2, -2, 3, -5});
        }
        first = rng.uniform(0, n - 1);
      } else {
        first += count * step;
      }
      // Keys first + i*step for i < count, all inside [0, n).
      const std::int64_t room = step > 0 ? (n - 1 - first) / step + 1 : first / -step + 1;
      if (first < 0 || first >= n || room <= 0) {
        count = 0;
        continue;
      }
      count = static_cast<int>(std::min<std::int64_t>(
          room, rng.chance(0.7) ? 64 : rng.pick(std::vector<std::int64_t>{1, 7, 32, 33, 63})));
      const std::uint64_t got = probe.window(sg, first, step, count);
      std::uint64_t want = 0;
      const prefixhit::detail::SpecGroupPlan& spec = plan.spec_groups[sg];
      for (int i = 0; i < count; ++i) {
        bool present = true;
        for (int m = 0; m < spec.num_members; ++m) {
          present =
              present && source.contains(plan.members[spec.first_member + m], first + i * step);
        }
        want |= static_cast<std::uint64_t>(present) << i;
      }
      ASSERT_EQ(got, want) << "call " << call << ": sg " << sg << " first " << first << " step "
                           << step << " count " << count;
    }
  }
}

/// Lanes split the row: lane 0 writes hit_length and status, lane l the groups g with
/// g mod 32 == l, so with 32 lanes every entry is written exactly once.
TEST(WarpTwin, EachLaneWritesItsOwnGroups) {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 64;
  for (int g = 0; g < prefixhit::kMaxGroups; ++g) {
    c.groups.push_back(g % 2 == 0 ? GroupSpec::full_attention(64)
                                  : GroupSpec::sliding_window_attention(16, 32));
  }
  const Coordinator coordinator(c);
  const prefixhit::detail::LookupPlan& plan = coordinator.plan();
  const auto groups = static_cast<std::size_t>(plan.num_groups);
  Rng rng(fresh_seed());
  Request req;
  for (int i = 0; i < 40; ++i) {
    req.hashes.push_back(random_digest(rng));
  }
  req.max_length = 40 * 16;
  const auto n = static_cast<std::int64_t>(req.hashes.size());
  const std::vector<std::uint8_t> ones(groups * static_cast<std::size_t>(n), 1);
  const prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                           prefixhit::detail::kPresenceLookahead>
      probe{&plan, prefixhit::detail::PresenceTableSource{ones.data(), n}, n};
  Outputs all_lanes(1, plan.num_groups);
  for (int lane = 0; lane < prefixhit::detail::kWarpSize; ++lane) {
    Outputs one_lane(1, plan.num_groups);
    prefixhit::detail::lookup_request(plan, n, req.max_length, true, probe, 0, lane,
                                      prefixhit::detail::kWarpSize, one_lane.view());
    prefixhit::detail::lookup_request(plan, n, req.max_length, true, probe, 0, lane,
                                      prefixhit::detail::kWarpSize, all_lanes.view());
    EXPECT_EQ(one_lane.hit_lengths[0] != Outputs::kPoison, lane == 0);
    EXPECT_EQ(one_lane.status[0] != Outputs::kPoisonStatus, lane == 0);
    for (std::size_t g = 0; g < groups; ++g) {
      const bool mine = static_cast<int>(g) % prefixhit::detail::kWarpSize == lane;
      EXPECT_EQ(one_lane.num_blocks[g] != Outputs::kPoison, mine)
          << "lane " << lane << " group " << g;
      EXPECT_EQ(one_lane.num_placeholders[g] != Outputs::kPoison, mine)
          << "lane " << lane << " group " << g;
    }
  }
  KeySet store;
  for (std::size_t g = 0; g < groups; ++g) {
    for (const BlockDigest& d : req.hashes) {
      store.insert(static_cast<int>(g), d);
    }
  }
  const Expected want = expect_from(
      [&] { return coordinator.find_longest_cache_hit(req.hashes, req.max_length, store); });
  EXPECT_TRUE(row_matches(all_lanes, 0, plan.num_groups, want));
}

}  // namespace
