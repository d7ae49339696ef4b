// Public value types of prefixhit: digests, group specs, configuration and results.
// C++17, so that runtimes and .cu files built as C++17 can include it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/error_kind.hpp"

namespace prefixhit {

/// A minimal contiguous view (std::span is C++20; the API stays C++17).
template <class T>
class span {
 public:
  constexpr span() noexcept = default;
  constexpr span(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  /// Any contiguous container (vector, array, string...). A view of const elements may also
  /// wrap a temporary, which lives until the end of the full expression (a call's argument).
  template <class C, class = std::enable_if_t<
                         std::is_convertible_v<decltype(std::declval<C&>().data()), T*> &&
                         (std::is_const_v<T> || std::is_lvalue_reference_v<C>)>>
  constexpr span(C&& container) noexcept  // NOLINT(google-explicit-constructor)
      : data_(container.data()), size_(container.size()) {}
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T>>>
  constexpr span(span<U> other) noexcept  // NOLINT(google-explicit-constructor)
      : data_(other.data()), size_(other.size()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr span subspan(std::size_t offset, std::size_t count) const noexcept {
    return span(data_ + offset, count);
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A block digest of 8, 16 or 32 bytes (the digest width, `digest_size`): SHA-256 chained over
/// the prompt (32), vLLM's xxhash / xxhash_cbor (16), or a vLLM KV event's 64-bit integer hash
/// (8). Storage is always 32 bytes: a narrower digest lives in the first `digest_size` bytes and
/// the rest are zero. The width is part of a key's identity: indexes, key sets and coordinators
/// are told the width, and keys of different widths never compare equal there.
struct alignas(8) BlockDigest {
  static constexpr std::size_t kSize = 32;
  std::array<std::uint8_t, kSize> bytes{};

  /// Whether `size` is a supported digest width: 8, 16 or 32.
  static constexpr bool valid_size(std::size_t size) noexcept {
    return size == 8 || size == 16 || size == 32;
  }
  /// Parses 16, 32 or 64 hex digits (an 8-, 16- or 32-byte digest, zero-padded); throws
  /// InvalidArgument naming the problem otherwise.
  static BlockDigest from_hex(std::string_view hex);
  /// Copies 8, 16 or 32 bytes (zero-padded); throws InvalidArgument for any other length.
  static BlockDigest from_bytes(const std::uint8_t* data, std::size_t size);
  /// Copies exactly `digest_size` bytes; throws InvalidArgument naming both sizes when `size`
  /// differs (or digest_size is not a valid width).
  static BlockDigest from_bytes(const std::uint8_t* data, std::size_t size,
                                std::size_t digest_size);
  /// The 8-byte digest of a 64-bit integer hash (as vLLM KV events carry): its big-endian bytes.
  static BlockDigest from_int_hash(std::uint64_t hash) noexcept;
  /// 64 hex digits (all 32 stored bytes).
  std::string to_hex() const;
  /// The first `digest_size` bytes as hex.
  std::string to_hex(std::size_t digest_size) const;
  /// Whether this is a valid digest of width `digest_size`: every byte past it is zero.
  bool fits(std::size_t digest_size) const noexcept;

  friend bool operator==(const BlockDigest& a, const BlockDigest& b) noexcept {
    return a.bytes == b.bytes;
  }
  friend bool operator!=(const BlockDigest& a, const BlockDigest& b) noexcept { return !(a == b); }
  friend bool operator<(const BlockDigest& a, const BlockDigest& b) noexcept {
    return a.bytes < b.bytes;
  }
};
static_assert(sizeof(BlockDigest) == 32, "BlockDigest must be exactly 32 bytes");

/// Throws InvalidArgument ("<what>: ...") unless digest_size is 8, 16 or 32.
void check_digest_size(std::size_t digest_size, std::string_view what);
/// Throws InvalidArgument naming `what[i]` for the first digest that is not a valid width
/// `digest_size` digest (a nonzero byte past the width), or for an invalid width.
void check_digests(span<const BlockDigest> digests, std::size_t digest_size, std::string_view what);

/// The spec kinds of SEMANTICS.md 2 and 9.2. Kinds that share a finder never merge.
enum class GroupKind : std::uint8_t {
  full_attention,
  mla_attention,
  sliding_window,
  sliding_window_mla,
  chunked_local,
  mamba,
  circular_buffer,  ///< vllm-0.33 only; never prefix-cacheable (SEMANTICS.md 11.2)
};

/// Which reference release the coordinator reproduces: vLLM PR #49069 (SEMANTICS.md 1-9) or
/// the vLLM 0.33.0 release (SEMANTICS.md 11). Spelled "pr49069" and "vllm-0.33".
enum class Semantics : std::uint8_t { pr49069, vllm_0_33 };

/// Mamba state caching mode; `align` with block_size > H turns on partial hash hits.
enum class MambaCacheMode : std::uint8_t { none, align, all };

const char* to_string(GroupKind kind) noexcept;
const char* to_string(MambaCacheMode mode) noexcept;
const char* to_string(Semantics semantics) noexcept;
/// Parses "pr49069" or "vllm-0.33" (also "vllm_0_33"); throws InvalidArgument otherwise.
Semantics parse_semantics(std::string_view name);
/// Parses a kind name ("full_attention", ...); throws InvalidArgument for an unknown name.
GroupKind parse_group_kind(std::string_view name);
MambaCacheMode parse_mamba_cache_mode(std::string_view name);

/// One KV-cache group's spec. Every field except `eagle` takes part in spec equality, so two
/// groups merge into one spec group only when all of them agree (SEMANTICS.md 2.1, 11.4).
struct GroupSpec {
  GroupKind kind = GroupKind::full_attention;
  std::int64_t block_size = 0;
  bool eagle = false;  ///< the group holds EAGLE/MTP draft layers
  std::int64_t num_kv_heads = 0;
  std::int64_t head_size = 0;
  std::string dtype;
  /// Window in tokens: required by the sliding-window kinds; optional and inert on full_attention.
  std::optional<std::int64_t> sliding_window;
  /// Chunk in tokens: required by chunked_local; optional and inert on full_attention.
  std::optional<std::int64_t> attention_chunk_size;
  MambaCacheMode mamba_cache_mode = MambaCacheMode::none;
  std::int64_t state_dim = 0;  ///< only distinguishes Mamba specs
  /// vllm-0.33, window kinds: tokens kept beyond the window; the coverage window
  /// sliding_window + extra_retained_tokens replaces the window everywhere (SEMANTICS.md 11.2).
  std::int64_t extra_retained_tokens = 0;
  /// vllm-0.33, sliding_window_mla only: true makes the group not prefix-cacheable.
  bool bounded_replay = false;
  /// Every other field of the real spec (head_size_v, compress_ratio, page_size_padded, Mamba
  /// shapes and dtypes ...) as canonical text: compact JSON of an object with sorted keys, e.g.
  /// {"head_size_v":128}. Empty means none. Only compared, byte for byte, never interpreted.
  std::string identity;

  /// Spec equality: everything but `eagle`, including the kind and the identity. Under
  /// vllm-0.33 the window kinds compare the coverage window instead of sliding_window and
  /// extra_retained_tokens separately (SEMANTICS.md 11.4).
  bool same_spec(const GroupSpec& other, Semantics semantics = Semantics::pr49069) const noexcept;
  /// Whether lookups use this group (SEMANTICS.md 11.3): not a circular buffer and not a
  /// bounded-replay sliding_window_mla group.
  bool prefix_cacheable() const noexcept;
  /// sliding_window + extra_retained_tokens (0 without a window).
  std::int64_t coverage_window() const noexcept;

  static GroupSpec full_attention(std::int64_t block_size, bool eagle = false);
  static GroupSpec mla_attention(std::int64_t block_size, bool eagle = false);
  static GroupSpec sliding_window_attention(std::int64_t block_size, std::int64_t window,
                                            bool eagle = false);
  static GroupSpec sliding_window_mla(std::int64_t block_size, std::int64_t window,
                                      bool eagle = false);
  static GroupSpec chunked_local(std::int64_t block_size, std::int64_t chunk_size,
                                 bool eagle = false);
  static GroupSpec mamba(std::int64_t block_size, MambaCacheMode mode, bool eagle = false);
  static GroupSpec circular_buffer(std::int64_t block_size, bool eagle = false);
};

/// The GroupSpec field names of the dict / JSON form, in declaration order.
span<const std::string_view> spec_field_names() noexcept;
/// For a field name that is not a known spec field: the known field it most likely misspells
/// (same letters up to case and '-'/'_', or within a small edit distance), or empty when it looks
/// like a genuine extra field of the real spec, which then goes into the identity. Names of real
/// vLLM spec fields that happen to be close to a known one (head_size_v, dtypes) are never typos.
std::string_view spec_field_typo(std::string_view name) noexcept;

/// vLLM 0.33's engine rule for the partial-hits flag (SEMANTICS.md 11.1): true iff there is
/// more than one group, some Mamba `align` group has block_size > H (>= H when dcp > 1), and
/// every prefix-cacheable window or chunked-local group has block_size * dcp == H. Throws
/// InvalidArgument unless H > 0 and dcp >= 1.
bool partial_hits_rule(span<const GroupSpec> groups, std::int64_t hash_block_size,
                       std::int64_t dcp_world_size = 1);

/// The coordinator's configuration. Validated by the Coordinator constructor.
struct Config {
  /// The reference release to reproduce. pr49069 keeps every earlier result unchanged.
  Semantics semantics = Semantics::pr49069;
  std::int64_t hash_block_size = 16;       ///< H
  std::int64_t scheduler_block_size = 16;  ///< S: a common multiple of every block size
  bool use_eagle = false;                  ///< speculative decoding with an EAGLE/MTP drafter
  std::optional<std::int64_t> retention_interval;  ///< R: nullopt, 0 or a positive token count
  std::vector<GroupSpec> groups;                   ///< indexed by KV-cache group id
  /// Bytes per block hash: 8, 16 or 32 (BlockDigest). Lookups, chunk keys and key plans take
  /// digests of this width, and stores must hold keys of this width.
  std::size_t digest_size = BlockDigest::kSize;
  /// Partial (fine-grained) hash hits. vllm-0.33: the coordinator's input, nullopt meaning
  /// partial_hits_rule(groups, H). pr49069: derived by rule 1.3; a given value must agree with
  /// the rule (InvalidConfig otherwise), so a caller can state what it expects.
  std::optional<bool> enable_partial_hash_hits;
};

/// Merged groups with equal specs, in processing order (full attention first).
struct SpecGroup {
  std::vector<int> group_ids;  ///< ascending
  bool use_eagle = false;
  GroupSpec spec;  ///< the spec of the first member
};

/// The answer of one lookup: the hit length and, per group id, the block list in compact form.
struct LookupResult {
  std::int64_t hit_length = 0;
  std::vector<GroupHit> groups;  ///< indexed by group id

  /// The reference's list for one group: false = placeholder, true = loaded block.
  std::vector<bool> mask(int group_id) const;
  std::vector<std::vector<bool>> masks() const;
};

/// One group's store or lookup mask over chunks [first_chunk, end_chunk).
/// `keep` empty-optional is the reference's `None`: every chunk in the range.
struct ChunkMask {
  std::int64_t first_chunk = 0;
  std::int64_t end_chunk = 0;
  std::optional<std::vector<std::uint8_t>> keep;

  bool is_all() const noexcept { return !keep.has_value(); }
  /// Whether chunk `chunk` (absolute index) is to be written / read.
  bool contains(std::int64_t chunk) const noexcept;
};

}  // namespace prefixhit
