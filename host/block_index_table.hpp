// The CPU BlockIndex's table storage (internal to host/block_index*.cpp): one table generation
// (bucket headers and digests, the layout of detail/index_slots.hpp), its allocation on 2 MiB
// huge pages, and the host fast paths of the slot logic (SSE2 tag match, tag-and-meta
// candidates, prefetch).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/types.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace prefixhit::cpu_index {

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

template <class T>
using AlignedArray = std::unique_ptr<T, FreeDeleter>;

/// 64-byte aligned storage for `count` elements; throws CapacityExceeded when it cannot be had.
/// Arrays of 2 MiB or more are 2 MiB aligned and asked to use huge pages: a probe of a large
/// table then costs a cache miss without a page walk on top (issue 14).
template <class T>
inline AlignedArray<T> allocate_aligned(std::uint64_t count, const char* what) {
  constexpr std::uint64_t kHugePage = std::uint64_t{1} << 21;
  const std::uint64_t align = count * sizeof(T) >= kHugePage ? kHugePage : 64;
  const std::uint64_t bytes = ((count * sizeof(T)) + align - 1) & ~(align - 1);
  void* p = bytes == 0 ? nullptr
                       : std::aligned_alloc(static_cast<std::size_t>(align),
                                            static_cast<std::size_t>(bytes));
  if (p == nullptr) {
    throw CapacityExceeded("BlockIndex: cannot allocate " + std::to_string(bytes) + " bytes for " +
                           what);
  }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHugePage) {
    madvise(p, static_cast<std::size_t>(bytes), MADV_HUGEPAGE);  // a hint: failure is harmless
  }
#endif
  return AlignedArray<T>(static_cast<T*>(p));
}

/// One table generation: the layout of index_slots.hpp (bucket headers, digests apart).
struct Table {
  std::uint64_t buckets = 0;  // a power of two
  std::uint64_t bucket_mask = 0;
  AlignedArray<detail::BucketHeader> headers;
  AlignedArray<BlockDigest> digests;

  std::uint64_t slots() const { return detail::slots_of_buckets(buckets); }
};

/// Every slot empty (the spare tag bytes and the meta words zero too).
inline void clear_headers(Table& t) {
  static_assert(detail::kEmptyTag == 0, "a zeroed header is an empty bucket");
  std::memset(static_cast<void*>(t.headers.get()), 0,
              static_cast<std::size_t>(t.buckets * sizeof(detail::BucketHeader)));
}

inline Table allocate_table(std::uint64_t buckets) {
  Table t;
  t.buckets = buckets;
  t.bucket_mask = buckets - 1;
  const std::uint64_t slots = detail::slots_of_buckets(buckets);
  t.headers = allocate_aligned<detail::BucketHeader>(buckets, "bucket headers");
  t.digests = allocate_aligned<BlockDigest>(slots, "digests");
  clear_headers(t);
  return t;
}

/// Bit j set iff slot j of the bucket holds `tag` (SSE2 where available, else the SWAR twin).
inline std::uint32_t match_tags(const detail::BucketHeader* header, std::uint8_t tag) {
#if defined(__SSE2__)
  return detail::match_bucket_sse2(header, tag);
#else
  return detail::match_bucket(detail::load_bucket_tags(header), tag);
#endif
}

/// Every tag, spread over the 8 bytes of a word, by the hash's top byte: tag_of tabulated. The
/// cache-resident lookups are bound by their instructions, and a needle from this table costs a
/// shift, a load and a shuffle, where tag_of's multiply and SSE2's spread of a byte cost eight.
struct TagNeedles {
  std::uint64_t of_top[256];
};

constexpr TagNeedles make_tag_needles() {
  TagNeedles t{};
  for (std::uint64_t top = 0; top < 256; ++top) {
    t.of_top[top] = 0x0101010101010101ULL * detail::tag_of(top << 56);
  }
  return t;
}

alignas(64) inline constexpr TagNeedles kTagNeedles = make_tag_needles();

/// match_tags(header, tag_of(hash)), with the needle from kTagNeedles.
inline std::uint32_t match_hash_tag(const detail::BucketHeader* header, std::uint64_t hash) {
#if defined(__SSE2__)
  return detail::match_bucket_needle_sse2(
      header, _mm_set1_epi64x(static_cast<long long>(kTagNeedles.of_top[hash >> 56])));
#else
  return match_tags(header, detail::tag_of(hash));
#endif
}

/// The portable twin of candidates_of, lane by lane (tests compare the two).
inline std::uint32_t candidates_by_lanes(const detail::BucketHeader* header, std::uint8_t tag,
                                         std::uint32_t meta) {
  std::uint32_t c = match_tags(header, tag);
  for (std::uint32_t m = c; m != 0; m &= m - 1) {
    const int lane = __builtin_ctz(m);
    if (header->metas[lane] != meta) {
      c &= ~(1U << lane);
    }
  }
  return c;
}

/// Lanes whose tag and meta word both equal the key's: the slots whose digest a hit must
/// compare. The header line alone rules out the others.
inline std::uint32_t candidates_of(const detail::BucketHeader* header, std::uint8_t tag,
                                   std::uint32_t meta) {
#if defined(__SSE2__)
  // All 12 lanes at once: the tag bytes in one compare, the meta words in three, packed down to a
  // byte per lane so that one mask holds both tests (no branch per tag match).
  const auto* line = reinterpret_cast<const __m128i*>(header);
  const __m128i tags = _mm_cmpeq_epi8(_mm_load_si128(line), _mm_set1_epi8(static_cast<char>(tag)));
  const __m128i want = _mm_set1_epi32(static_cast<int>(meta));
  const __m128i metas_0_7 = _mm_packs_epi32(_mm_cmpeq_epi32(_mm_load_si128(line + 1), want),
                                            _mm_cmpeq_epi32(_mm_load_si128(line + 2), want));
  const __m128i metas_8_11 =
      _mm_packs_epi32(_mm_cmpeq_epi32(_mm_load_si128(line + 3), want), _mm_setzero_si128());
  const __m128i both = _mm_and_si128(tags, _mm_packs_epi16(metas_0_7, metas_8_11));
  return static_cast<std::uint32_t>(_mm_movemask_epi8(both)) & detail::kBucketLanes;
#else
  return candidates_by_lanes(header, tag, meta);
#endif
}

/// Whether a caller's digest equals a table slot's (all 32 bytes; the meta word is compared
/// apart): two 16-byte compares on SSE2, else the shared word compare. `stored` must be a slot of
/// a table's digest array, which is 32-byte aligned: its loads fold into the compares (two
/// instructions fewer per hit on the window path, bound by its instructions).
inline bool digest_equal(const BlockDigest& key, const BlockDigest& stored) {
#if defined(__SSE2__)
  const auto* a = reinterpret_cast<const __m128i*>(&key);
  const auto* b = reinterpret_cast<const __m128i*>(&stored);
  const __m128i eq = _mm_and_si128(_mm_cmpeq_epi8(_mm_loadu_si128(a), _mm_load_si128(b)),
                                   _mm_cmpeq_epi8(_mm_loadu_si128(a + 1), _mm_load_si128(b + 1)));
  return _mm_movemask_epi8(eq) == 0xFFFF;
#else
  return detail::slot_key_equal(detail::make_slot_key(key, 0), stored, 0);
#endif
}

/// Where a prefetch puts its line. Into::l2 (`prefetcht2` on x86) is for a request far ahead of
/// its use: it does not hold one of the L1's few miss buffers for the whole wait (lookup_stream).
enum class Into { l1, l2 };

template <Into kInto = Into::l1>
inline void prefetch(const void* p) {
  __builtin_prefetch(p, 0, kInto == Into::l1 ? 3 : 1);
}

/// Prefetches a caller's digest: both of its lines when it straddles two. A digest array from
/// malloc is 16-byte aligned, so half its digests do (and every key of a walk whose stride is a
/// multiple of 64 bytes, when the first does); a hash waiting for the second line stalls the
/// whole probe pipeline. Branch-free: for a digest within one line the second prefetch is the
/// same line's.
inline void prefetch_digest(const BlockDigest* digest) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(digest);
  prefetch(bytes);
  prefetch(bytes + sizeof(BlockDigest) - 1);
}

inline bool slot_key_less(const detail::SlotKey& a, const detail::SlotKey& b) {
  for (int i = 0; i < 4; ++i) {
    if (a.w[i] != b.w[i]) {
      return a.w[i] < b.w[i];
    }
  }
  return a.meta < b.meta;
}

inline bool slot_key_same(const detail::SlotKey& a, const detail::SlotKey& b) {
  return a.w[0] == b.w[0] && a.w[1] == b.w[1] && a.w[2] == b.w[2] && a.w[3] == b.w[3] &&
         a.meta == b.meta;
}

}  // namespace prefixhit::cpu_index
