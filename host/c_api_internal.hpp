// Shared by the C ABI's translation units (c_api.cpp, c_api_lookup.cpp, c_api_mirror.cpp,
// c_api_router.cpp, c_api_device.cpp): the handles, and the one way an entry point runs its body
// (guarded), which turns exceptions into statuses and sets prefixhit_last_error().
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/prefixhit.h"

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

namespace prefixhit {
class MirrorSink;  // event_mirror.hpp
}  // namespace prefixhit

namespace prefixhit::capi {

/// Records the thread's last error message (never throws: an allocation failure leaves it empty).
void set_error(const char* message) noexcept;
/// Success clears the thread's last error.
void clear_error() noexcept;
const char* last_error() noexcept;

/// Runs `body` and turns every outcome into a status. `body` returns nothing and throws on
/// failure; success clears the thread's last error.
template <class Body>
inline prefixhit_status guarded(Body&& body) noexcept {
  try {
    body();
    clear_error();
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

prefixhit_status guarded_call(const std::function<void()>& body) noexcept;

template <class T>
void require(const T* pointer, const char* what) {
  if (pointer == nullptr) {
    throw prefixhit::InvalidArgument(std::string(what) + " must not be NULL");
  }
}

/// The most digests one call may pass: 2^40 (32 TiB of digests).
inline constexpr std::size_t kMaxDigestsPerCall = std::size_t{1} << 40;

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
  const prefixhit::BlockDigest& operator[](std::size_t i) const noexcept { return view_[i]; }

 private:
  std::vector<prefixhit::BlockDigest> copy_;
  prefixhit::span<const prefixhit::BlockDigest> view_;
};

/// A batch over the caller's arrays (the digests already converted): offsets [n + 1],
/// max_lengths [n], apply_eagle [n] or NULL.
inline LookupBatch make_batch(const DigestInput& digests, const std::int64_t* offsets,
                              const std::int64_t* max_lengths, const std::uint8_t* apply_eagle,
                              std::size_t num_requests) {
  LookupBatch batch;
  batch.digests = digests.view();
  batch.offsets = {offsets, num_requests + 1};
  batch.max_lengths = {max_lengths, num_requests};
  if (apply_eagle != nullptr) {
    batch.apply_eagle = {apply_eagle, num_requests};
  }
  return batch;
}

/// A lookup's block index namespace: one the index cannot hold is an error, not a silent miss
/// ("<what> <ns> exceeds the 24-bit namespace maximum ...").
inline void check_lookup_namespace(std::uint32_t ns, const char* what) {
  if (ns > prefixhit::kMaxNamespace) {
    throw prefixhit::InvalidArgument(std::string(what) + " " + std::to_string(ns) +
                                     " exceeds the 24-bit namespace maximum " +
                                     std::to_string(prefixhit::kMaxNamespace));
  }
}

/// The pointer checks of a batch lookup (CPU or GPU), in their order: offsets always, the
/// per-request inputs and outputs when there are requests.
inline void require_lookup_arrays(const std::int64_t* offsets, const std::int64_t* max_lengths,
                                  const std::int64_t* hit_lengths, const std::int64_t* num_blocks,
                                  const std::int64_t* num_placeholders, std::size_t num_requests) {
  require(offsets, "offsets");
  if (num_requests != 0) {
    require(max_lengths, "max_lengths");
    require(hit_lengths, "hit_lengths");
    require(num_blocks, "num_blocks");
    require(num_placeholders, "num_placeholders");
  }
}

/// The C options of a block index as the C++ options of either index (BlockIndexOptions,
/// DeviceBlockIndexOptions: the same fields); NULL and zero fields keep the defaults.
template <class Options>
Options index_options(const prefixhit_block_index_options* options) {
  Options o;
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
  return o;
}

/// The index behind a handle; throws InvalidArgument for NULL.
BlockIndex& block_index_of(prefixhit_block_index* handle);
/// The coordinator behind a handle; throws InvalidArgument for NULL.
const Coordinator& coordinator_of(const prefixhit_coordinator* handle);
/// A mirror sink into a device index (c_api_device.cpp): DeviceBlockIndexSink behind the
/// handle's mutex. Throws as device index calls do for a NULL handle, Unavailable without CUDA.
std::unique_ptr<MirrorSink> device_mirror_sink(prefixhit_device_block_index* handle);

}  // namespace prefixhit::capi
