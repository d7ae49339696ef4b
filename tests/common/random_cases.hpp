// Random configurations, requests and stores shaped like the conformance vectors' families,
// shared by the warp-probe twin test (tests/cpu) and the GPU batch lookup tests (tests/gpu), so
// that both run the same kinds of cases. C++17, so nvcc compiles it too.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::testing::cases {

/// A fresh seed per run, or PREFIXHIT_TEST_SEED to replay a failure.
inline std::uint64_t fresh_seed() {
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
inline constexpr int kNumShapes = 7;
inline const char* shape_name(Shape shape) {
  static const char* const kNames[] = {"single",       "simple_hybrid", "multi_group", "dsv4",
                                       "mamba_hybrid", "chunked_local", "mixed"};
  return kNames[static_cast<int>(shape)];
}

/// H times a divisor of S/H: a block size every rule of SEMANTICS.md 1.1 accepts.
inline std::int64_t random_block(Rng& rng, std::int64_t h, std::int64_t s) {
  std::vector<std::int64_t> divisors;
  for (std::int64_t d = 1; d <= s / h; ++d) {
    if ((s / h) % d == 0) {
      divisors.push_back(d);
    }
  }
  return h * rng.pick(divisors);
}

inline GroupSpec random_spec(Rng& rng, GroupKind kind, std::int64_t h, std::int64_t s) {
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
    case GroupKind::circular_buffer:  // vllm-0.33 only, never prefix-cacheable
      spec = GroupSpec::circular_buffer(b, eagle);
      break;
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

inline Config random_config(Rng& rng, Shape shape) {
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

inline BlockDigest random_digest(Rng& rng) {
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

inline Request random_request(Rng& rng, const Coordinator& coordinator) {
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
inline KeySet random_store(Rng& rng, const Coordinator& coordinator, const Request& req) {
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

inline std::string describe(const Config& c, Shape shape, const Request& req) {
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

}  // namespace prefixhit::testing::cases
