// Saving a BlockIndex to a file and loading it back: a versioned, checksummed binary format
// written atomically (temp file, fsync, rename, fsync of the folder).
//
// File layout, versions 1 and 2. Every integer is little-endian; offsets are in bytes.
// Version 2 differs only in the record's group word, which also holds the key's digest width;
// a writer uses version 1 whenever every key is a 32-byte digest (so such files read the same
// in builds that predate widths), and version 2 otherwise. Readers accept both, and refuse a
// version 2 image without an 8- or 16-byte key: one key set has exactly one image.
//
//   header (40 bytes)
//     0   char[8]  magic            "PFXINDEX"
//     8   u32      format_version   1 or 2
//     12  u32      header_bytes     40
//     16  u32      record_bytes     40
//     20  u32      flags            0 (no flags are defined; a reader rejects any set bit)
//     24  u64      key_count        number of records
//     32  u32      reserved         0
//     36  u32      header_crc       CRC-32C of bytes [0, 36)
//   records (key_count * 40 bytes), strictly ascending by (namespace, group id, digest width,
//   digest bytes)
//     0   u32      namespace        <= kMaxNamespace
//     4   i32      group_id         version 1: in [0, kMaxIndexFileGroupId]
//         u32      group word       version 2: bits 0-7 the group id (as above), bits 8-15 the
//                                   digest width in bytes (8, 16 or 32), bits 16-31 zero
//     8   u8[32]   digest           a narrower digest in its first bytes, the rest zero
//   trailer (4 bytes)
//     0   u32      file_crc         CRC-32C of every byte before the trailer
//
// The file size is therefore exactly 44 + 40 * key_count. Why each piece exists:
// * the header CRC lets a reader trust key_count before it reads any record, so a corrupt count
//   is reported as corruption (and can never size an allocation: the count must also match the
//   file size, which the reader checks first);
// * the strict record order makes a file a canonical function of the index content (the same
//   keys always give the same bytes) and turns duplicated or reordered records into errors;
// * the trailer CRC covers the header and every record, so any flipped byte is detected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

inline constexpr char kIndexFileMagic[8] = {'P', 'F', 'X', 'I', 'N', 'D', 'E', 'X'};
/// The version written when every key is a 32-byte digest, and the one with digest widths.
inline constexpr std::uint32_t kIndexFileVersion = 1;
inline constexpr std::uint32_t kIndexFileVersionWithWidths = 2;
inline constexpr std::size_t kIndexFileHeaderBytes = 40;
inline constexpr std::size_t kIndexFileRecordBytes = 40;
inline constexpr std::size_t kIndexFileTrailerBytes = 4;
/// Group ids a file may hold: exactly those a BlockIndex accepts (0 .. kMaxGroups-1), so that a
/// file read_index_stats accepts always loads.
inline constexpr int kMaxIndexFileGroupId = kMaxGroups - 1;

/// What a verified index file holds.
struct IndexFileStats {
  std::uint32_t format_version = 0;
  std::uint64_t key_count = 0;
  std::uint64_t file_bytes = 0;
  std::map<Namespace, std::uint64_t> keys_per_namespace;
  /// Keys per (namespace, group id).
  std::map<std::pair<Namespace, int>, std::uint64_t> keys_per_group;
  /// Keys per digest width (8, 16 or 32 bytes).
  std::map<std::size_t, std::uint64_t> keys_per_digest_size;
};

/// Writes every key of `index` to `path`, atomically: the bytes go to a temporary file in the
/// same folder, which is fsynced and then renamed over `path`; finally the folder is fsynced so
/// that the rename itself is durable. If anything fails before the rename, the temporary file is
/// removed and `path` is left exactly as it was (absent, or the old file, whole). Throws IoError
/// naming the step and the OS error. `index` is read through for_each (a consistent snapshot),
/// so concurrent writers are allowed; the file holds the snapshot.
/// Returns the statistics of the file written.
IndexFileStats save_index(const BlockIndex& index, const std::string& path);

/// Reads `path`, verifies all of it (magic, version, header CRC, size, record order and bounds,
/// file CRC) while building a fresh index with `into`'s options, and only then replaces `into`'s
/// content with it (move assignment). On any error `into` is untouched. Throws FormatError for a
/// malformed file (naming what is wrong and where), IoError for an OS error (missing file,
/// permission, read failure), CapacityExceeded when the keys exceed `into`'s max_capacity.
/// Replacing the content is not atomic with respect to other threads using `into`: callers must
/// not use `into` concurrently with load_index.
IndexFileStats load_index(const std::string& path, BlockIndex& into);

/// Verifies `path` exactly as load_index does, without building an index, and returns what it
/// holds. Throws as load_index does.
IndexFileStats read_index_stats(const std::string& path);

/// The file image of `index` (what save_index writes), for tests, tools and fuzz seeds.
std::vector<std::uint8_t> serialize_index(const BlockIndex& index);

/// load_index / read_index_stats over an in-memory image. `origin` names it in error messages.
IndexFileStats load_index_from_memory(const std::uint8_t* data, std::size_t size, BlockIndex& into,
                                      const std::string& origin = "<memory>");
IndexFileStats read_index_stats_from_memory(const std::uint8_t* data, std::size_t size,
                                            const std::string& origin = "<memory>");

/// CRC-32C (Castagnoli), as used by the format; `crc` chains calls (start with 0).
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0) noexcept;

}  // namespace prefixhit
