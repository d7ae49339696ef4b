// The C ABI (include/prefixhit/prefixhit.h) over the C++ API: errors, configuration and the
// coordinator (stores, lookups and masks: c_api_lookup.cpp). Every entry point catches
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

#include "host/c_api_internal.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"

namespace {

using prefixhit::ErrorKind;
using prefixhit::capi::guarded;
using prefixhit::capi::require;

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

}  // namespace

extern "C" {

const char* prefixhit_last_error(void) {
  return prefixhit::capi::last_error();
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

}  // extern "C"

namespace prefixhit::capi {

namespace {
thread_local std::string g_last_error;
}  // namespace

void set_error(const char* message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    g_last_error.clear();  // no memory even for the message: an empty one is all we can give
  }
}
void clear_error() noexcept {
  g_last_error.clear();
}
const char* last_error() noexcept {
  return g_last_error.c_str();
}
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
