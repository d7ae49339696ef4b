// Value types: digests, kinds, spec equality, result expansion, typed errors.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

namespace {

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

}  // namespace

BlockDigest BlockDigest::from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0 || !valid_size(hex.size() / 2)) {
    throw InvalidArgument("block digest must be 16, 32 or 64 hex digits (8, 16 or 32 bytes), got " +
                          std::to_string(hex.size()) + " characters");
  }
  BlockDigest digest;
  for (std::size_t i = 0; i < hex.size() / 2; ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      throw InvalidArgument("block digest has a non-hex character at position " +
                            std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    }
    digest.bytes[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return digest;
}

BlockDigest BlockDigest::from_bytes(const std::uint8_t* data, std::size_t size) {
  if (!valid_size(size)) {
    throw InvalidArgument("block digest must be 8, 16 or 32 bytes, got " + std::to_string(size));
  }
  BlockDigest digest;
  std::memcpy(digest.bytes.data(), data, size);
  return digest;
}

BlockDigest BlockDigest::from_bytes(const std::uint8_t* data, std::size_t size,
                                    std::size_t digest_size) {
  check_digest_size(digest_size, "block digest");
  if (size != digest_size) {
    throw InvalidArgument("block digest must be " + std::to_string(digest_size) +
                          " bytes (the digest_size), got " + std::to_string(size));
  }
  return from_bytes(data, size);
}

BlockDigest BlockDigest::from_int_hash(std::uint64_t hash) noexcept {
  BlockDigest digest;
  for (std::size_t i = 0; i < 8; ++i) {
    digest.bytes[i] = static_cast<std::uint8_t>(hash >> (56 - 8 * i));
  }
  return digest;
}

std::string BlockDigest::to_hex() const {
  return to_hex(kSize);
}

std::string BlockDigest::to_hex(std::size_t digest_size) const {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::size_t n = digest_size < kSize ? digest_size : kSize;
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

bool BlockDigest::fits(std::size_t digest_size) const noexcept {
  std::uint8_t tail = 0;
  for (std::size_t i = digest_size; i < kSize; ++i) {
    tail |= bytes[i];
  }
  return tail == 0;
}

void check_digest_size(std::size_t digest_size, std::string_view what) {
  if (!BlockDigest::valid_size(digest_size)) {
    throw InvalidArgument(std::string(what) + ": digest_size must be 8, 16 or 32 bytes, got " +
                          std::to_string(digest_size));
  }
}

void check_digests(span<const BlockDigest> digests, std::size_t digest_size,
                   std::string_view what) {
  check_digest_size(digest_size, what);
  if (digest_size == BlockDigest::kSize) {
    return;
  }
  // Word-wise: the tail of a narrow digest is 16 or 24 zero bytes.
  const std::size_t first_word = digest_size / 8;
  for (std::size_t i = 0; i < digests.size(); ++i) {
    std::uint64_t words[4];
    std::memcpy(words, digests[i].bytes.data(), sizeof(words));
    std::uint64_t tail = 0;
    for (std::size_t w = first_word; w < 4; ++w) {
      tail |= words[w];
    }
    if (tail != 0) {
      throw InvalidArgument(std::string(what) + "[" + std::to_string(i) + "] is not a " +
                            std::to_string(digest_size) + "-byte digest: bytes past " +
                            std::to_string(digest_size) + " must be zero");
    }
  }
}

const char* to_string(GroupKind kind) noexcept {
  switch (kind) {
    case GroupKind::full_attention:
      return "full_attention";
    case GroupKind::mla_attention:
      return "mla_attention";
    case GroupKind::sliding_window:
      return "sliding_window";
    case GroupKind::sliding_window_mla:
      return "sliding_window_mla";
    case GroupKind::chunked_local:
      return "chunked_local";
    case GroupKind::mamba:
      return "mamba";
    case GroupKind::circular_buffer:
      return "circular_buffer";
  }
  return "unknown";
}

const char* to_string(Semantics semantics) noexcept {
  switch (semantics) {
    case Semantics::pr49069:
      return "pr49069";
    case Semantics::vllm_0_33:
      return "vllm-0.33";
  }
  return "unknown";
}

Semantics parse_semantics(std::string_view name) {
  if (name == "pr49069") {
    return Semantics::pr49069;
  }
  if (name == "vllm-0.33" || name == "vllm_0_33") {
    return Semantics::vllm_0_33;
  }
  throw InvalidArgument("unknown semantics '" + std::string(name) +
                        "' (expected pr49069 or vllm-0.33)");
}

const char* to_string(MambaCacheMode mode) noexcept {
  switch (mode) {
    case MambaCacheMode::none:
      return "none";
    case MambaCacheMode::align:
      return "align";
    case MambaCacheMode::all:
      return "all";
  }
  return "unknown";
}

GroupKind parse_group_kind(std::string_view name) {
  for (GroupKind kind : {GroupKind::full_attention, GroupKind::mla_attention,
                         GroupKind::sliding_window, GroupKind::sliding_window_mla,
                         GroupKind::chunked_local, GroupKind::mamba, GroupKind::circular_buffer}) {
    if (name == to_string(kind)) {
      return kind;
    }
  }
  throw InvalidArgument("unknown group kind '" + std::string(name) +
                        "' (expected full_attention, mla_attention, sliding_window, "
                        "sliding_window_mla, chunked_local, mamba or circular_buffer)");
}

MambaCacheMode parse_mamba_cache_mode(std::string_view name) {
  for (MambaCacheMode mode : {MambaCacheMode::none, MambaCacheMode::align, MambaCacheMode::all}) {
    if (name == to_string(mode)) {
      return mode;
    }
  }
  throw InvalidArgument("unknown mamba_cache_mode '" + std::string(name) +
                        "' (expected none, align or all)");
}

bool GroupSpec::same_spec(const GroupSpec& other, Semantics semantics) const noexcept {
  const bool window_kind =
      kind == GroupKind::sliding_window || kind == GroupKind::sliding_window_mla;
  // 0.33 compares a window group's coverage window, not its two parts (SEMANTICS.md 11.4).
  const bool windows_equal = semantics == Semantics::vllm_0_33 && window_kind
                                 ? sliding_window.has_value() == other.sliding_window.has_value() &&
                                       coverage_window() == other.coverage_window()
                                 : sliding_window == other.sliding_window &&
                                       extra_retained_tokens == other.extra_retained_tokens;
  return kind == other.kind && block_size == other.block_size &&
         num_kv_heads == other.num_kv_heads && head_size == other.head_size &&
         dtype == other.dtype && windows_equal &&
         attention_chunk_size == other.attention_chunk_size &&
         mamba_cache_mode == other.mamba_cache_mode && state_dim == other.state_dim &&
         bounded_replay == other.bounded_replay && identity == other.identity;
}

bool GroupSpec::prefix_cacheable() const noexcept {
  return kind != GroupKind::circular_buffer &&
         !(kind == GroupKind::sliding_window_mla && bounded_replay);
}

std::int64_t GroupSpec::coverage_window() const noexcept {
  return sliding_window.value_or(0) + extra_retained_tokens;
}

namespace {

constexpr std::string_view kSpecFields[] = {"kind",
                                            "block_size",
                                            "eagle",
                                            "num_kv_heads",
                                            "head_size",
                                            "dtype",
                                            "sliding_window",
                                            "attention_chunk_size",
                                            "mamba_cache_mode",
                                            "state_dim",
                                            "extra_retained_tokens",
                                            "bounded_replay"};

/// Real fields of vLLM's spec dataclasses that sit close to a known name; they are identity.
constexpr std::string_view kIdentityFields[] = {"head_size_v", "dtypes", "shapes", "block_sizes"};

std::string normalise_name(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '-') {
      c = '_';
    }
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    out.push_back(c);
  }
  return out;
}

/// Edit distance counting an adjacent transposition as one edit ("eagel" is one from "eagle").
std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t limit) {
  if ((a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit) {
    return limit + 1;
  }
  const std::size_t w = b.size() + 1;
  std::vector<std::size_t> d((a.size() + 1) * w);
  for (std::size_t i = 0; i <= a.size(); ++i) {
    for (std::size_t j = 0; j <= b.size(); ++j) {
      if (i == 0 || j == 0) {
        d[i * w + j] = i + j;
        continue;
      }
      std::size_t best = std::min({d[(i - 1) * w + j] + 1, d[i * w + j - 1] + 1,
                                   d[(i - 1) * w + j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        best = std::min(best, d[(i - 2) * w + j - 2] + 1);
      }
      d[i * w + j] = best;
    }
  }
  return d[a.size() * w + b.size()];
}

}  // namespace

span<const std::string_view> spec_field_names() noexcept {
  return span<const std::string_view>(kSpecFields, sizeof(kSpecFields) / sizeof(kSpecFields[0]));
}

std::string_view spec_field_typo(std::string_view name) noexcept {
  for (std::string_view field : kSpecFields) {
    if (name == field) {
      return {};
    }
  }
  for (std::string_view field : kIdentityFields) {
    if (name == field) {
      return {};
    }
  }
  try {
    const std::string norm = normalise_name(name);
    for (std::string_view field : kSpecFields) {
      // Short names tolerate one edit, longer ones two: "blok_size", "slidingwindow", "Dtype".
      const std::size_t limit = field.size() <= 5 ? 1 : 2;
      if (norm == field || edit_distance(norm, field, limit) <= limit) {
        return field;
      }
    }
  } catch (...) {
    return {};  // out of memory for a name: no suggestion
  }
  return {};
}

bool partial_hits_rule(span<const GroupSpec> groups, std::int64_t hash_block_size,
                       std::int64_t dcp_world_size) {
  if (hash_block_size <= 0) {
    throw InvalidArgument("partial_hits_rule: hash_block_size must be positive, got " +
                          std::to_string(hash_block_size));
  }
  if (dcp_world_size < 1) {
    throw InvalidArgument("partial_hits_rule: dcp_world_size must be at least 1, got " +
                          std::to_string(dcp_world_size));
  }
  // (1) more than one group, cacheable or not.
  if (groups.size() <= 1) {
    return false;
  }
  bool mamba_align = false;
  for (const GroupSpec& g : groups) {
    // (2) a Mamba align group whose block spans several hash blocks.
    if (g.kind == GroupKind::mamba && g.mamba_cache_mode == MambaCacheMode::align &&
        (g.block_size > hash_block_size ||
         (dcp_world_size > 1 && g.block_size == hash_block_size))) {
      mamba_align = true;
    }
    // (3) every cacheable window / chunked-local group is exactly one hash block per rank.
    const bool block_granular = g.kind == GroupKind::sliding_window ||
                                g.kind == GroupKind::sliding_window_mla ||
                                g.kind == GroupKind::chunked_local;
    if (g.prefix_cacheable() && block_granular &&
        (hash_block_size % dcp_world_size != 0 ||
         g.block_size != hash_block_size / dcp_world_size)) {
      return false;
    }
  }
  return mamba_align;
}

namespace {
GroupSpec attention_spec(GroupKind kind, std::int64_t block_size, bool eagle,
                         std::int64_t num_kv_heads, std::int64_t head_size) {
  GroupSpec spec;
  spec.kind = kind;
  spec.block_size = block_size;
  spec.eagle = eagle;
  spec.num_kv_heads = num_kv_heads;
  spec.head_size = head_size;
  spec.dtype = "bfloat16";
  return spec;
}
}  // namespace

GroupSpec GroupSpec::full_attention(std::int64_t block_size, bool eagle) {
  return attention_spec(GroupKind::full_attention, block_size, eagle, 8, 128);
}

GroupSpec GroupSpec::mla_attention(std::int64_t block_size, bool eagle) {
  return attention_spec(GroupKind::mla_attention, block_size, eagle, 1, 512);
}

GroupSpec GroupSpec::sliding_window_attention(std::int64_t block_size, std::int64_t window,
                                              bool eagle) {
  GroupSpec spec = attention_spec(GroupKind::sliding_window, block_size, eagle, 8, 128);
  spec.sliding_window = window;
  return spec;
}

GroupSpec GroupSpec::sliding_window_mla(std::int64_t block_size, std::int64_t window, bool eagle) {
  GroupSpec spec = attention_spec(GroupKind::sliding_window_mla, block_size, eagle, 1, 512);
  spec.sliding_window = window;
  return spec;
}

GroupSpec GroupSpec::chunked_local(std::int64_t block_size, std::int64_t chunk_size, bool eagle) {
  GroupSpec spec = attention_spec(GroupKind::chunked_local, block_size, eagle, 8, 128);
  spec.attention_chunk_size = chunk_size;
  return spec;
}

GroupSpec GroupSpec::mamba(std::int64_t block_size, MambaCacheMode mode, bool eagle) {
  GroupSpec spec;
  spec.kind = GroupKind::mamba;
  spec.block_size = block_size;
  spec.eagle = eagle;
  spec.mamba_cache_mode = mode;
  spec.state_dim = 1;
  return spec;
}

GroupSpec GroupSpec::circular_buffer(std::int64_t block_size, bool eagle) {
  return attention_spec(GroupKind::circular_buffer, block_size, eagle, 8, 128);
}

std::vector<bool> LookupResult::mask(int group_id) const {
  if (group_id < 0 || static_cast<std::size_t>(group_id) >= groups.size()) {
    throw InvalidArgument("group id " + std::to_string(group_id) + " is not in this result (" +
                          std::to_string(groups.size()) + " groups)");
  }
  const GroupHit& hit = groups[static_cast<std::size_t>(group_id)];
  std::vector<bool> out(static_cast<std::size_t>(hit.num_blocks), true);
  for (std::int64_t i = 0; i < hit.num_placeholders; ++i) {
    out[static_cast<std::size_t>(i)] = false;
  }
  return out;
}

std::vector<std::vector<bool>> LookupResult::masks() const {
  std::vector<std::vector<bool>> out;
  out.reserve(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out.push_back(mask(static_cast<int>(g)));
  }
  return out;
}

bool ChunkMask::contains(std::int64_t chunk) const noexcept {
  if (chunk < first_chunk || chunk >= end_chunk) {
    return false;
  }
  return !keep.has_value() || (*keep)[static_cast<std::size_t>(chunk - first_chunk)] != 0;
}

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::invalid_config:
      throw InvalidConfig(message);
    case ErrorKind::unaligned_length:
      throw UnalignedLength(message);
    case ErrorKind::unsupported_eagle_chunked_local:
      throw UnsupportedEagleChunkedLocal(message);
    case ErrorKind::unsupported_alignment_chunked_local:
      throw UnsupportedAlignmentChunkedLocal(message);
    case ErrorKind::unsupported_alignment_sliding_window:
      throw UnsupportedAlignmentSlidingWindow(message);
    case ErrorKind::invalid_argument:
      throw InvalidArgument(message);
    case ErrorKind::capacity_exceeded:
      throw CapacityExceeded(message);
    case ErrorKind::io_error:
      throw IoError(message);
    case ErrorKind::format_error:
      throw FormatError(message);
    case ErrorKind::cuda_error:
      throw CudaError(message);
    case ErrorKind::unavailable:
      throw Unavailable(message);
    case ErrorKind::ok:
      break;
  }
  throw Error(kind, message);
}

}  // namespace prefixhit
