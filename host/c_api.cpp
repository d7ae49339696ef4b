// The C ABI (include/prefixhit/prefixhit.h) over the C++ API. Every entry point catches
// everything: a C caller (or a Rust/Go FFI) must never see a C++ exception unwind through it.
#include "prefixhit/prefixhit.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"

// Handles are the C++ objects themselves behind opaque C names.
struct prefixhit_coordinator {
  prefixhit::Coordinator coordinator;
};
struct prefixhit_key_set {
  prefixhit::KeySet set;
};
struct prefixhit_block_index {
  prefixhit::BlockIndex index;
};
struct prefixhit_lookup_result {
  prefixhit::LookupResult result;
};
struct prefixhit_chunk_masks {
  std::vector<prefixhit::ChunkMask> masks;
};

namespace {

using prefixhit::ErrorKind;

// The statuses mirror ErrorKind value for value, so a status is a plain cast.
static_assert(PREFIXHIT_OK == static_cast<int>(ErrorKind::ok), "status mirrors ErrorKind");
static_assert(PREFIXHIT_STATUS_INVALID_CONFIG == static_cast<int>(ErrorKind::invalid_config), "");
static_assert(PREFIXHIT_STATUS_UNALIGNED_LENGTH == static_cast<int>(ErrorKind::unaligned_length),
              "");
static_assert(PREFIXHIT_STATUS_UNSUPPORTED_EAGLE_CHUNKED_LOCAL ==
                  static_cast<int>(ErrorKind::unsupported_eagle_chunked_local),
              "");
static_assert(PREFIXHIT_STATUS_UNSUPPORTED_ALIGNMENT_CHUNKED_LOCAL ==
                  static_cast<int>(ErrorKind::unsupported_alignment_chunked_local),
              "");
static_assert(PREFIXHIT_STATUS_UNSUPPORTED_ALIGNMENT_SLIDING_WINDOW ==
                  static_cast<int>(ErrorKind::unsupported_alignment_sliding_window),
              "");
static_assert(PREFIXHIT_STATUS_INVALID_ARGUMENT == static_cast<int>(ErrorKind::invalid_argument),
              "");
static_assert(PREFIXHIT_STATUS_CAPACITY_EXCEEDED == static_cast<int>(ErrorKind::capacity_exceeded),
              "");
static_assert(PREFIXHIT_STATUS_IO_ERROR == static_cast<int>(ErrorKind::io_error), "");
static_assert(PREFIXHIT_STATUS_FORMAT_ERROR == static_cast<int>(ErrorKind::format_error), "");
static_assert(PREFIXHIT_STATUS_CUDA_ERROR == static_cast<int>(ErrorKind::cuda_error), "");
static_assert(PREFIXHIT_STATUS_UNAVAILABLE == static_cast<int>(ErrorKind::unavailable), "");
static_assert(PREFIXHIT_DIGEST_SIZE == prefixhit::BlockDigest::kSize, "digest size");
static_assert(PREFIXHIT_MAX_GROUPS == prefixhit::kMaxGroups, "group limit");

thread_local std::string g_last_error;

/// Records a message without letting an allocation failure escape (the caller is noexcept).
void set_error(const char* message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    g_last_error.clear();  // no memory even for the message: an empty one is all we can give
  }
}

/// Runs `body` and turns every outcome into a status. `body` returns nothing and throws on
/// failure; success clears the thread's last error.
template <class Body>
prefixhit_status guarded(Body&& body) noexcept {
  try {
    body();
    g_last_error.clear();
    return PREFIXHIT_OK;
  } catch (const prefixhit::Error& e) {
    set_error(e.what());
    return static_cast<prefixhit_status>(e.kind());
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
    return PREFIXHIT_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(e.what());
    return PREFIXHIT_STATUS_INTERNAL;
  } catch (...) {
    set_error("unknown internal error");
    return PREFIXHIT_STATUS_INTERNAL;
  }
}

template <class T>
void require(const T* pointer, const char* what) {
  if (pointer == nullptr) {
    throw prefixhit::InvalidArgument(std::string(what) + " must not be NULL");
  }
}

/// The most digests one call may pass: 2^40 (32 TiB of digests).
constexpr std::size_t kMaxDigestsPerCall = std::size_t{1} << 40;

/// Digest view of `n` digests of `width` bytes each (n * width bytes), safe for any alignment of
/// the caller's buffer.
class DigestInput {
 public:
  DigestInput(const std::uint8_t* keys, std::size_t n, const char* what,
              std::size_t width = prefixhit::BlockDigest::kSize) {
    prefixhit::check_digest_size(width, what);
    // A count no buffer can hold (n * 32 near or past 2^64) is a caller's mistake, not a size
    // to read or allocate.
    if (n > kMaxDigestsPerCall) {
      throw prefixhit::InvalidArgument(std::string("num_") + what + " " + std::to_string(n) +
                                       " is more digests than one call accepts (at most 2^40)");
    }
    if (n != 0) {
      require(keys, what);
    }
    // BlockDigest is 32 plain bytes, aligned to 8 for device copies; the caller's buffer may
    // have any alignment, so borrow it when it is suitably aligned and copy it otherwise.
    // Narrower digests are widened (zero-padded) into the 32-byte form.
    if (width == prefixhit::BlockDigest::kSize &&
        reinterpret_cast<std::uintptr_t>(keys) % alignof(prefixhit::BlockDigest) == 0) {
      view_ = {reinterpret_cast<const prefixhit::BlockDigest*>(keys), n};
    } else if (width == prefixhit::BlockDigest::kSize) {
      copy_.resize(n);
      std::memcpy(copy_.data(), keys, n * prefixhit::BlockDigest::kSize);
      view_ = {copy_.data(), copy_.size()};
    } else {
      copy_.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        std::memcpy(copy_[i].bytes.data(), keys + i * width, width);
      }
      view_ = {copy_.data(), copy_.size()};
    }
  }
  prefixhit::span<const prefixhit::BlockDigest> view() const noexcept { return view_; }

 private:
  std::vector<prefixhit::BlockDigest> copy_;
  prefixhit::span<const prefixhit::BlockDigest> view_;
};

prefixhit::GroupKind to_kind(prefixhit_group_kind kind) {
  switch (kind) {
    case PREFIXHIT_FULL_ATTENTION:
      return prefixhit::GroupKind::full_attention;
    case PREFIXHIT_MLA_ATTENTION:
      return prefixhit::GroupKind::mla_attention;
    case PREFIXHIT_SLIDING_WINDOW:
      return prefixhit::GroupKind::sliding_window;
    case PREFIXHIT_SLIDING_WINDOW_MLA:
      return prefixhit::GroupKind::sliding_window_mla;
    case PREFIXHIT_CHUNKED_LOCAL:
      return prefixhit::GroupKind::chunked_local;
    case PREFIXHIT_MAMBA:
      return prefixhit::GroupKind::mamba;
    case PREFIXHIT_CIRCULAR_BUFFER:
      return prefixhit::GroupKind::circular_buffer;
  }
  throw prefixhit::InvalidConfig("unknown group kind " + std::to_string(static_cast<int>(kind)));
}

prefixhit::MambaCacheMode to_mode(prefixhit_mamba_cache_mode mode) {
  switch (mode) {
    case PREFIXHIT_MAMBA_NONE:
      return prefixhit::MambaCacheMode::none;
    case PREFIXHIT_MAMBA_ALIGN:
      return prefixhit::MambaCacheMode::align;
    case PREFIXHIT_MAMBA_ALL:
      return prefixhit::MambaCacheMode::all;
  }
  throw prefixhit::InvalidConfig("unknown mamba_cache_mode " +
                                 std::to_string(static_cast<int>(mode)));
}

prefixhit::GroupSpec to_spec(const prefixhit_group_spec& in) {
  prefixhit::GroupSpec spec;
  spec.kind = to_kind(in.kind);
  spec.block_size = in.block_size;
  spec.eagle = in.eagle != 0;
  spec.num_kv_heads = in.num_kv_heads;
  spec.head_size = in.head_size;
  spec.dtype = in.dtype != nullptr ? in.dtype : "";
  if (in.sliding_window != 0) {
    spec.sliding_window = in.sliding_window;
  }
  if (in.attention_chunk_size != 0) {
    spec.attention_chunk_size = in.attention_chunk_size;
  }
  spec.mamba_cache_mode = to_mode(in.mamba_cache_mode);
  spec.state_dim = in.state_dim;
  spec.extra_retained_tokens = in.extra_retained_tokens;
  spec.bounded_replay = in.bounded_replay != 0;
  spec.identity = in.identity != nullptr ? in.identity : "";
  return spec;
}

std::vector<prefixhit::GroupSpec> to_specs(const prefixhit_group_spec* groups, std::size_t n) {
  if (n != 0) {
    require(groups, "groups");
  }
  std::vector<prefixhit::GroupSpec> out;
  out.reserve(n);
  for (std::size_t g = 0; g < n; ++g) {
    out.push_back(to_spec(groups[g]));
  }
  return out;
}

prefixhit::Config to_config(const prefixhit_config& c) {
  prefixhit::Config config;
  switch (c.semantics) {
    case PREFIXHIT_SEMANTICS_PR49069:
      config.semantics = prefixhit::Semantics::pr49069;
      break;
    case PREFIXHIT_SEMANTICS_VLLM_0_33:
      config.semantics = prefixhit::Semantics::vllm_0_33;
      break;
    default:
      throw prefixhit::InvalidConfig("unknown semantics " +
                                     std::to_string(static_cast<int>(c.semantics)));
  }
  switch (c.enable_partial_hash_hits) {
    case PREFIXHIT_PARTIAL_AUTO:
      break;
    case PREFIXHIT_PARTIAL_OFF:
      config.enable_partial_hash_hits = false;
      break;
    case PREFIXHIT_PARTIAL_ON:
      config.enable_partial_hash_hits = true;
      break;
    default:
      throw prefixhit::InvalidConfig("unknown enable_partial_hash_hits " +
                                     std::to_string(static_cast<int>(c.enable_partial_hash_hits)));
  }
  config.hash_block_size = c.hash_block_size;
  config.scheduler_block_size = c.scheduler_block_size;
  config.use_eagle = c.use_eagle != 0;
  config.digest_size = c.digest_size == 0 ? prefixhit::BlockDigest::kSize : c.digest_size;
  if (c.retention_interval != PREFIXHIT_NO_RETENTION_INTERVAL) {
    config.retention_interval = c.retention_interval;  // other negatives fail validation
  }
  if (c.num_groups != 0) {
    require(c.groups, "config->groups");
  }
  config.groups = to_specs(c.groups, c.num_groups);
  return config;
}

/// The lookup's store as an ExistenceSource (the view lives in `view`).
const prefixhit::ExistenceSource& resolve(const prefixhit_store* store,
                                          std::optional<prefixhit::BlockIndex::View>& view,
                                          std::size_t digest_size) {
  require(store, "store");
  if ((store->key_set == nullptr) == (store->block_index == nullptr)) {
    throw prefixhit::InvalidArgument("store must name exactly one of key_set and block_index");
  }
  if (store->key_set != nullptr) {
    return store->key_set->set;
  }
  // As in prefixhit_block_index_contains: a namespace the index cannot hold is an error, not
  // a silent miss.
  if (store->ns > prefixhit::kMaxNamespace) {
    throw prefixhit::InvalidArgument("store->ns " + std::to_string(store->ns) +
                                     " exceeds the 24-bit namespace maximum " +
                                     std::to_string(prefixhit::kMaxNamespace));
  }
  view.emplace(store->block_index->index, store->ns, digest_size);
  return *view;
}

std::int32_t checked_group(const prefixhit::LookupResult& result, std::int32_t group_id) {
  if (group_id < 0 || static_cast<std::size_t>(group_id) >= result.groups.size()) {
    throw prefixhit::InvalidArgument("group_id " + std::to_string(group_id) + " is outside [0, " +
                                     std::to_string(result.groups.size()) + ")");
  }
  return group_id;
}

}  // namespace

extern "C" {

const char* prefixhit_last_error(void) {
  return g_last_error.c_str();
}

const char* prefixhit_status_name(prefixhit_status status) {
  switch (status) {
    case PREFIXHIT_STATUS_OUT_OF_MEMORY:
      return "out_of_memory";
    case PREFIXHIT_STATUS_INTERNAL:
      return "internal";
    default:
      break;
  }
  const int value = static_cast<int>(status);
  if (value < 0 || value > static_cast<int>(ErrorKind::unavailable)) {
    return "unknown";
  }
  return prefixhit::to_string(static_cast<ErrorKind>(value));
}

const char* prefixhit_version(void) {
  return "0.1.0";
}

// ---- coordinator ----------------------------------------------------------------------------

prefixhit_status prefixhit_coordinator_create(const prefixhit_config* config,
                                              prefixhit_coordinator** out) {
  return guarded([&] {
    require(config, "config");
    require(out, "out");
    *out = nullptr;
    *out = new prefixhit_coordinator{prefixhit::Coordinator(to_config(*config))};
  });
}

void prefixhit_coordinator_destroy(prefixhit_coordinator* coordinator) {
  delete coordinator;
}

prefixhit_status prefixhit_coordinator_num_groups(const prefixhit_coordinator* coordinator,
                                                  int32_t* out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = coordinator->coordinator.num_groups();
  });
}

prefixhit_status prefixhit_coordinator_lookup_alignment(const prefixhit_coordinator* coordinator,
                                                        int64_t* out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = coordinator->coordinator.lookup_alignment();
  });
}

prefixhit_status prefixhit_partial_hits_rule(const prefixhit_group_spec* groups, size_t num_groups,
                                             int64_t hash_block_size, int64_t dcp_world_size,
                                             int* out) {
  return guarded([&] {
    require(out, "out");
    const std::vector<prefixhit::GroupSpec> specs = to_specs(groups, num_groups);
    *out = prefixhit::partial_hits_rule(prefixhit::span<const prefixhit::GroupSpec>(specs),
                                        hash_block_size, dcp_world_size)
               ? 1
               : 0;
  });
}

prefixhit_status prefixhit_coordinator_partial_hash_hits(const prefixhit_coordinator* coordinator,
                                                         int* out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = coordinator->coordinator.enable_partial_hash_hits() ? 1 : 0;
  });
}

prefixhit_status prefixhit_coordinator_eagle_group_ids(const prefixhit_coordinator* coordinator,
                                                       int32_t* ids, size_t capacity,
                                                       size_t* count) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(count, "count");
    const std::vector<int>& eagle = coordinator->coordinator.eagle_group_ids();
    if (capacity != 0) {
      require(ids, "ids");
    }
    for (std::size_t i = 0; i < eagle.size() && i < capacity; ++i) {
      ids[i] = eagle[i];
    }
    *count = eagle.size();
  });
}

prefixhit_status prefixhit_coordinator_num_spec_groups(const prefixhit_coordinator* coordinator,
                                                       size_t* out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = coordinator->coordinator.spec_groups().size();
  });
}

prefixhit_status prefixhit_coordinator_spec_group(const prefixhit_coordinator* coordinator,
                                                  size_t k, int32_t* member_ids, size_t capacity,
                                                  size_t* num_members, int* use_eagle) {
  return guarded([&] {
    require(coordinator, "coordinator");
    const auto& groups = coordinator->coordinator.spec_groups();
    if (k >= groups.size()) {
      throw prefixhit::InvalidArgument("spec group " + std::to_string(k) + " is outside [0, " +
                                       std::to_string(groups.size()) + ")");
    }
    const prefixhit::SpecGroup& sg = groups[k];
    if (capacity != 0) {
      require(member_ids, "member_ids");
    }
    for (std::size_t i = 0; i < sg.group_ids.size() && i < capacity; ++i) {
      member_ids[i] = sg.group_ids[i];
    }
    if (num_members != nullptr) {
      *num_members = sg.group_ids.size();
    }
    if (use_eagle != nullptr) {
      *use_eagle = sg.use_eagle ? 1 : 0;
    }
  });
}

prefixhit_status prefixhit_coordinator_align_lookup_length(const prefixhit_coordinator* coordinator,
                                                           int64_t length, int64_t* out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = coordinator->coordinator.align_lookup_length(length);
  });
}

prefixhit_status prefixhit_coordinator_digest_size(const prefixhit_coordinator* coordinator,
                                                   size_t* out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = coordinator->coordinator.config().digest_size;
  });
}

// ---- stores ---------------------------------------------------------------------------------

prefixhit_status prefixhit_key_set_create(prefixhit_key_set** out) {
  return prefixhit_key_set_create_width(PREFIXHIT_DIGEST_SIZE, out);
}

prefixhit_status prefixhit_key_set_create_width(size_t digest_size, prefixhit_key_set** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    *out = new prefixhit_key_set{prefixhit::KeySet(digest_size)};
  });
}

void prefixhit_key_set_destroy(prefixhit_key_set* set) {
  delete set;
}

prefixhit_status prefixhit_key_set_insert(prefixhit_key_set* set, int32_t group_id,
                                          const uint8_t* keys, size_t num_keys, size_t* added) {
  return guarded([&] {
    require(set, "set");
    const DigestInput input(keys, num_keys, "keys", set->set.digest_size());
    std::size_t count = 0;
    for (const prefixhit::BlockDigest& key : input.view()) {
      count += set->set.insert(group_id, key) ? 1 : 0;
    }
    if (added != nullptr) {
      *added = count;
    }
  });
}

prefixhit_status prefixhit_key_set_size(const prefixhit_key_set* set, size_t* out) {
  return guarded([&] {
    require(set, "set");
    require(out, "out");
    *out = set->set.size();
  });
}

prefixhit_status prefixhit_block_index_create(const prefixhit_block_index_options* options,
                                              prefixhit_block_index** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    prefixhit::BlockIndexOptions o;
    if (options != nullptr) {
      if (options->initial_capacity != 0) {
        o.initial_capacity = options->initial_capacity;
      }
      if (options->max_load_factor != 0) {
        o.max_load_factor = options->max_load_factor;
      }
      o.max_capacity = options->max_capacity;
      o.seed = options->seed;
    }
    *out = new prefixhit_block_index{prefixhit::BlockIndex(o)};
  });
}

void prefixhit_block_index_destroy(prefixhit_block_index* index) {
  delete index;
}

prefixhit_status prefixhit_block_index_insert(prefixhit_block_index* index, uint32_t ns,
                                              int32_t group_id, const uint8_t* keys,
                                              size_t num_keys, size_t* inserted) {
  return prefixhit_block_index_insert_width(index, ns, group_id, PREFIXHIT_DIGEST_SIZE, keys,
                                            num_keys, inserted);
}

prefixhit_status prefixhit_block_index_insert_width(prefixhit_block_index* index, uint32_t ns,
                                                    int32_t group_id, size_t digest_size,
                                                    const uint8_t* keys, size_t num_keys,
                                                    size_t* inserted) {
  return guarded([&] {
    require(index, "index");
    const DigestInput input(keys, num_keys, "keys", digest_size);
    const std::size_t n = index->index.insert(ns, group_id, input.view(), digest_size);
    if (inserted != nullptr) {
      *inserted = n;
    }
  });
}

prefixhit_status prefixhit_block_index_erase(prefixhit_block_index* index, uint32_t ns,
                                             int32_t group_id, const uint8_t* keys, size_t num_keys,
                                             size_t* erased) {
  return prefixhit_block_index_erase_width(index, ns, group_id, PREFIXHIT_DIGEST_SIZE, keys,
                                           num_keys, erased);
}

prefixhit_status prefixhit_block_index_erase_width(prefixhit_block_index* index, uint32_t ns,
                                                   int32_t group_id, size_t digest_size,
                                                   const uint8_t* keys, size_t num_keys,
                                                   size_t* erased) {
  return guarded([&] {
    require(index, "index");
    const DigestInput input(keys, num_keys, "keys", digest_size);
    const std::size_t n = index->index.erase(ns, group_id, input.view(), digest_size);
    if (erased != nullptr) {
      *erased = n;
    }
  });
}

prefixhit_status prefixhit_block_index_contains(const prefixhit_block_index* index, uint32_t ns,
                                                int32_t group_id, const uint8_t* keys,
                                                size_t num_keys, uint8_t* present) {
  return prefixhit_block_index_contains_width(index, ns, group_id, PREFIXHIT_DIGEST_SIZE, keys,
                                              num_keys, present);
}

prefixhit_status prefixhit_block_index_contains_width(const prefixhit_block_index* index,
                                                      uint32_t ns, int32_t group_id,
                                                      size_t digest_size, const uint8_t* keys,
                                                      size_t num_keys, uint8_t* present) {
  return guarded([&] {
    require(index, "index");
    const DigestInput input(keys, num_keys, "keys", digest_size);
    if (num_keys != 0) {
      require(present, "present");
    }
    index->index.contains(ns, group_id, input.view(), present, digest_size);
  });
}

prefixhit_status prefixhit_block_index_size(const prefixhit_block_index* index, size_t* out) {
  return guarded([&] {
    require(index, "index");
    require(out, "out");
    *out = index->index.size();
  });
}

// ---- lookups --------------------------------------------------------------------------------

prefixhit_status prefixhit_find_longest_cache_hit(const prefixhit_coordinator* coordinator,
                                                  const uint8_t* hashes, size_t num_hashes,
                                                  int64_t max_length, const prefixhit_store* store,
                                                  int apply_eagle, prefixhit_lookup_result** out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = nullptr;
    const DigestInput input(hashes, num_hashes, "hashes",
                            coordinator->coordinator.config().digest_size);
    std::optional<prefixhit::BlockIndex::View> view;
    const prefixhit::ExistenceSource& source =
        resolve(store, view, coordinator->coordinator.config().digest_size);
    auto result = std::make_unique<prefixhit_lookup_result>();
    result->result = coordinator->coordinator.find_longest_cache_hit(input.view(), max_length,
                                                                     source, apply_eagle != 0);
    *out = result.release();
  });
}

prefixhit_status prefixhit_load_mask(const prefixhit_coordinator* coordinator, size_t num_hashes,
                                     int64_t token_len, prefixhit_lookup_result** out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = nullptr;
    auto result = std::make_unique<prefixhit_lookup_result>();
    result->result =
        coordinator->coordinator.load_mask(static_cast<std::int64_t>(num_hashes), token_len);
    *out = result.release();
  });
}

void prefixhit_lookup_result_destroy(prefixhit_lookup_result* result) {
  delete result;
}

prefixhit_status prefixhit_lookup_result_hit_length(const prefixhit_lookup_result* result,
                                                    int64_t* out) {
  return guarded([&] {
    require(result, "result");
    require(out, "out");
    *out = result->result.hit_length;
  });
}

prefixhit_status prefixhit_lookup_result_num_groups(const prefixhit_lookup_result* result,
                                                    int32_t* out) {
  return guarded([&] {
    require(result, "result");
    require(out, "out");
    *out = static_cast<int32_t>(result->result.groups.size());
  });
}

prefixhit_status prefixhit_lookup_result_group(const prefixhit_lookup_result* result,
                                               int32_t group_id, int64_t* num_blocks,
                                               int64_t* num_placeholders) {
  return guarded([&] {
    require(result, "result");
    const prefixhit::GroupHit& hit =
        result->result.groups[static_cast<std::size_t>(checked_group(result->result, group_id))];
    if (num_blocks != nullptr) {
      *num_blocks = hit.num_blocks;
    }
    if (num_placeholders != nullptr) {
      *num_placeholders = hit.num_placeholders;
    }
  });
}

prefixhit_status prefixhit_lookup_result_mask(const prefixhit_lookup_result* result,
                                              int32_t group_id, uint8_t* mask, size_t capacity,
                                              size_t* len) {
  return guarded([&] {
    require(result, "result");
    require(len, "len");
    const prefixhit::GroupHit& hit =
        result->result.groups[static_cast<std::size_t>(checked_group(result->result, group_id))];
    const auto blocks = static_cast<std::size_t>(hit.num_blocks);
    if (capacity != 0) {
      require(mask, "mask");
    }
    for (std::size_t i = 0; i < blocks && i < capacity; ++i) {
      mask[i] = static_cast<std::int64_t>(i) >= hit.num_placeholders ? 1 : 0;
    }
    *len = blocks;
  });
}

prefixhit_status prefixhit_find_longest_cache_hits(
    const prefixhit_coordinator* coordinator, const uint8_t* digests_in, size_t num_digests,
    const int64_t* offsets, const int64_t* max_lengths, const uint8_t* apply_eagle,
    size_t num_requests, const prefixhit_store* store, int num_threads, int64_t* hit_lengths,
    int64_t* num_blocks, int64_t* num_placeholders) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(offsets, "offsets");
    if (num_requests != 0) {
      require(max_lengths, "max_lengths");
      require(hit_lengths, "hit_lengths");
      require(num_blocks, "num_blocks");
      require(num_placeholders, "num_placeholders");
    }
    const DigestInput input(digests_in, num_digests, "digests",
                            coordinator->coordinator.config().digest_size);
    prefixhit::LookupBatch batch;
    batch.digests = input.view();
    batch.offsets = {offsets, num_requests + 1};
    batch.max_lengths = {max_lengths, num_requests};
    if (apply_eagle != nullptr) {
      batch.apply_eagle = {apply_eagle, num_requests};
    }
    std::optional<prefixhit::BlockIndex::View> view;
    const prefixhit::ExistenceSource& source =
        resolve(store, view, coordinator->coordinator.config().digest_size);
    prefixhit::BatchOptions options;
    options.num_threads = num_threads;
    const prefixhit::BatchLookupResult result =
        coordinator->coordinator.find_longest_cache_hits(batch, source, options);
    std::copy(result.hit_lengths.begin(), result.hit_lengths.end(), hit_lengths);
    std::copy(result.num_blocks.begin(), result.num_blocks.end(), num_blocks);
    std::copy(result.num_placeholders.begin(), result.num_placeholders.end(), num_placeholders);
  });
}

// ---- masks ----------------------------------------------------------------------------------

prefixhit_status prefixhit_store_mask(const prefixhit_coordinator* coordinator,
                                      int64_t aligned_token_len, int64_t start_token,
                                      int64_t num_prompt_tokens, prefixhit_chunk_masks** out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = nullptr;
    std::optional<std::int64_t> prompt;
    if (num_prompt_tokens != PREFIXHIT_NO_PROMPT_LENGTH) {
      prompt = num_prompt_tokens;  // other negatives are rejected by the coordinator
    }
    auto masks = std::make_unique<prefixhit_chunk_masks>();
    masks->masks = coordinator->coordinator.store_mask(aligned_token_len, start_token, prompt);
    *out = masks.release();
  });
}

prefixhit_status prefixhit_lookup_mask(const prefixhit_coordinator* coordinator,
                                       int64_t aligned_token_len, prefixhit_chunk_masks** out) {
  return guarded([&] {
    require(coordinator, "coordinator");
    require(out, "out");
    *out = nullptr;
    auto masks = std::make_unique<prefixhit_chunk_masks>();
    masks->masks = coordinator->coordinator.lookup_mask(aligned_token_len);
    *out = masks.release();
  });
}

void prefixhit_chunk_masks_destroy(prefixhit_chunk_masks* masks) {
  delete masks;
}

prefixhit_status prefixhit_chunk_masks_get(const prefixhit_chunk_masks* masks, int32_t group_id,
                                           int64_t* first_chunk, int64_t* end_chunk, int* is_all,
                                           const uint8_t** keep) {
  return guarded([&] {
    require(masks, "masks");
    if (group_id < 0 || static_cast<std::size_t>(group_id) >= masks->masks.size()) {
      throw prefixhit::InvalidArgument("group_id " + std::to_string(group_id) + " is outside [0, " +
                                       std::to_string(masks->masks.size()) + ")");
    }
    const prefixhit::ChunkMask& mask = masks->masks[static_cast<std::size_t>(group_id)];
    if (first_chunk != nullptr) {
      *first_chunk = mask.first_chunk;
    }
    if (end_chunk != nullptr) {
      *end_chunk = mask.end_chunk;
    }
    if (is_all != nullptr) {
      *is_all = mask.is_all() ? 1 : 0;
    }
    if (keep != nullptr) {
      *keep = mask.is_all() ? nullptr : mask.keep->data();
    }
  });
}

}  // extern "C"

// For the C ABI's other translation units (host/c_api_mirror.cpp): the same error handling and
// the block index handle.
namespace prefixhit::capi {
prefixhit_status guarded_call(const std::function<void()>& body) noexcept {
  return guarded(body);
}
BlockIndex& block_index_of(prefixhit_block_index* handle) {
  require(handle, "index");
  return handle->index;
}
const Coordinator& coordinator_of(const prefixhit_coordinator* handle) {
  require(handle, "coordinator");
  return handle->coordinator;
}
}  // namespace prefixhit::capi
