// The C ABI's stores, lookups and masks (include/prefixhit/prefixhit.h); the handles and the
// error handling are c_api_internal.hpp's.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "host/c_api_internal.hpp"
#include "prefixhit/existence.hpp"

namespace {

using prefixhit::capi::DigestInput;
using prefixhit::capi::guarded;
using prefixhit::capi::require;

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
  prefixhit::capi::check_lookup_namespace(store->ns, "store->ns");
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

/// An insert or erase of `num_keys` keys: the checks, the call and its count.
template <class Apply>
prefixhit_status apply_keys(prefixhit_block_index* index, const std::uint8_t* keys,
                            std::size_t num_keys, std::size_t digest_size, std::size_t* count,
                            Apply&& apply) {
  return guarded([&] {
    require(index, "index");
    const DigestInput input(keys, num_keys, "keys", digest_size);
    const std::size_t n = apply(index->index, input.view());
    if (count != nullptr) {
      *count = n;
    }
  });
}

}  // namespace

extern "C" {

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
    *out = new prefixhit_block_index{prefixhit::BlockIndex(
        prefixhit::capi::index_options<prefixhit::BlockIndexOptions>(options))};
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
  return apply_keys(
      index, keys, num_keys, digest_size, inserted,
      [&](prefixhit::BlockIndex& target, prefixhit::span<const prefixhit::BlockDigest> k) {
        return target.insert(ns, group_id, k, digest_size);
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
  return apply_keys(
      index, keys, num_keys, digest_size, erased,
      [&](prefixhit::BlockIndex& target, prefixhit::span<const prefixhit::BlockDigest> k) {
        return target.erase(ns, group_id, k, digest_size);
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
    prefixhit::capi::require_lookup_arrays(offsets, max_lengths, hit_lengths, num_blocks,
                                           num_placeholders, num_requests);
    const DigestInput input(digests_in, num_digests, "digests",
                            coordinator->coordinator.config().digest_size);
    const prefixhit::LookupBatch batch =
        prefixhit::capi::make_batch(input, offsets, max_lengths, apply_eagle, num_requests);
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
