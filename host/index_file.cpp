// Index persistence, the reader: verifies a whole image before anything reaches the index. The
// format is documented in include/prefixhit/index_file.hpp; the writer is index_file_save.cpp.
#include "prefixhit/index_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>

#include "host/index_file_format.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

namespace {

using namespace index_file_detail;  // NOLINT(google-build-using-namespace): this file's own format

// ---- CRC-32C, slicing by 8 ---------------------------------------------------------------------

struct Crc32cTables {
  std::uint32_t t[8][256];
  Crc32cTables() noexcept {
    constexpr std::uint32_t kPoly = 0x82F63B78U;  // Castagnoli, reflected
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) {
        c = (c & 1U) != 0 ? (c >> 1) ^ kPoly : c >> 1;
      }
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) {
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFU];
      }
    }
  }
};

const Crc32cTables& crc_tables() noexcept {
  static const Crc32cTables tables;
  return tables;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// ---- reading -----------------------------------------------------------------------------------

/// Where the bytes of a file image come from. `read` fills exactly `size` bytes or returns false
/// (the image ended early); OS failures throw IoError.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const = 0;
  virtual bool read(std::uint8_t* out, std::size_t size) = 0;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t size() const override { return size_; }
  bool read(std::uint8_t* out, std::size_t size) override {
    if (size > size_ - pos_) {
      return false;
    }
    if (size != 0) {
      std::memcpy(out, data_ + pos_, size);
    }
    pos_ += size;
    return true;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path), fd_(open_or_throw(path)) {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) {
      throw IoError(os_error("cannot stat index file", path, errno));
    }
    if (!S_ISREG(st.st_mode)) {
      throw IoError("index file '" + path + "' is " + file_kind(st.st_mode) +
                    ", not a regular file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    // Our writer never leaves a hole, and holes read as zeros, which no valid file holds (two
    // all-zero records are out of order). Refusing them up front keeps a sparse file that
    // declares billions of keys from costing minutes of reading zeros.
    const off_t hole = ::lseek(fd_.get(), 0, SEEK_HOLE);
    if (hole >= 0 && static_cast<std::uint64_t>(hole) < size_) {
      throw FormatError("index file '" + path + "': sparse file (a hole at byte " +
                        std::to_string(hole) + " of " + std::to_string(size_) +
                        "): not a file prefixhit wrote; it is corrupt or crafted");
    }
    if (::lseek(fd_.get(), 0, SEEK_SET) != 0) {
      throw IoError(os_error("cannot seek in index file", path, errno));
    }
  }
  std::uint64_t size() const override { return size_; }
  bool read(std::uint8_t* out, std::size_t size) override {
    std::size_t done = 0;
    while (done < size) {
      const ssize_t got = ::read(fd_.get(), out + done, size - done);
      if (got < 0) {
        if (errno == EINTR) {
          continue;
        }
        throw IoError(os_error("cannot read index file", path_, errno));
      }
      if (got == 0) {
        return false;  // shorter than fstat said: it shrank while we read
      }
      done += static_cast<std::size_t>(got);
    }
    return true;
  }

 private:
  static int open_or_throw(const std::string& path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; the
    // fstat above then refuses it. Reads of a regular file ignore the flag.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      throw IoError(os_error("cannot open index file", path, errno));
    }
    return fd;
  }

  std::string path_;
  Fd fd_;
  std::uint64_t size_ = 0;
};

/// Reads and verifies a whole image. Once the header is verified (count consistent with the file
/// size), `begin(key_count)` is called; then every record is handed to `sink` in file order (in
/// chunks). The caller must treat anything the sink built as provisional until read_image
/// returns, since the file CRC is only known at the end.
template <class Begin, class Sink>
IndexFileStats read_image(ByteSource& src, const std::string& origin, Begin&& begin, Sink&& sink) {
  const std::string where = "index file '" + origin + "': ";
  const std::uint64_t file_bytes = src.size();
  if (file_bytes == 0) {
    throw FormatError(where + "empty file (0 bytes), not a prefixhit index");
  }
  std::array<std::uint8_t, kIndexFileHeaderBytes> header{};
  const std::size_t head =
      static_cast<std::size_t>(std::min<std::uint64_t>(file_bytes, kIndexFileHeaderBytes));
  if (!src.read(header.data(), head)) {
    throw FormatError(where + "truncated while reading the header");
  }
  if (head < sizeof(kIndexFileMagic) && std::memcmp(header.data(), kIndexFileMagic, head) == 0) {
    throw FormatError(where + "truncated: " + std::to_string(file_bytes) +
                      " bytes, shorter than the magic number");
  }
  if (head < sizeof(kIndexFileMagic) ||
      std::memcmp(header.data(), kIndexFileMagic, sizeof(kIndexFileMagic)) != 0) {
    throw FormatError(where +
                      "bad magic: not a prefixhit index file (expected it to start with "
                      "\"PFXINDEX\")");
  }
  if (head < kIndexFileHeaderBytes) {
    throw FormatError(where + "truncated: " + std::to_string(file_bytes) +
                      " bytes, shorter than the " + std::to_string(kIndexFileHeaderBytes) +
                      "-byte header");
  }
  const std::uint32_t version = get_u32(header.data() + 8);
  if (version != kIndexFileVersion && version != kIndexFileVersionWithWidths) {
    throw FormatError(where + "unsupported format version " + std::to_string(version) +
                      " (this build reads versions " + std::to_string(kIndexFileVersion) + " and " +
                      std::to_string(kIndexFileVersionWithWidths) + ")");
  }
  const std::uint32_t stored_header_crc = get_u32(header.data() + 36);
  const std::uint32_t header_crc = crc32c(header.data(), 36);
  if (stored_header_crc != header_crc) {
    throw FormatError(where + "header checksum mismatch (stored " + hex32(stored_header_crc) +
                      ", computed " + hex32(header_crc) + "): the header is corrupt");
  }
  if (get_u32(header.data() + 12) != kIndexFileHeaderBytes ||
      get_u32(header.data() + 16) != kIndexFileRecordBytes) {
    throw FormatError(where + "header/record sizes " + std::to_string(get_u32(header.data() + 12)) +
                      "/" + std::to_string(get_u32(header.data() + 16)) + " differ from " +
                      std::to_string(kIndexFileHeaderBytes) + "/" +
                      std::to_string(kIndexFileRecordBytes) + " of versions 1 and 2");
  }
  if (get_u32(header.data() + 20) != 0 || get_u32(header.data() + 32) != 0) {
    throw FormatError(where + "unknown flags or reserved bits set in the header");
  }
  const std::uint64_t key_count = get_u64(header.data() + 24);
  constexpr std::uint64_t kFixed = kIndexFileHeaderBytes + kIndexFileTrailerBytes;
  const std::uint64_t max_count =
      (std::numeric_limits<std::uint64_t>::max() - kFixed) / kIndexFileRecordBytes;
  if (key_count > max_count) {
    throw FormatError(where + "absurd key count " + std::to_string(key_count));
  }
  // The count must match the file's actual size before it is trusted for anything: this is what
  // keeps a corrupt or hostile count from sizing an allocation.
  const std::uint64_t expected = kFixed + key_count * kIndexFileRecordBytes;
  if (file_bytes < expected) {
    throw FormatError(where + "truncated: the header says " + std::to_string(key_count) +
                      " keys (" + std::to_string(expected) + " bytes) but the file has " +
                      std::to_string(file_bytes) + " bytes");
  }
  if (file_bytes > expected) {
    throw FormatError(where + std::to_string(file_bytes - expected) +
                      " unexpected bytes after the trailer (the header says " +
                      std::to_string(key_count) + " keys, " + std::to_string(expected) + " bytes)");
  }

  begin(key_count);
  IndexFileStats stats;
  stats.format_version = version;
  stats.key_count = key_count;
  stats.file_bytes = file_bytes;
  std::uint32_t crc = crc32c(header.data(), header.size());
  constexpr std::size_t kChunk = 4096;                                       // records per read
  constexpr std::uint64_t kRecordsReadPastAnError = std::uint64_t{1} << 20;  // 40 MiB
  std::vector<std::uint8_t> buffer(
      static_cast<std::size_t>(std::min<std::uint64_t>(key_count, kChunk)) * kIndexFileRecordBytes);
  std::vector<Record> records;
  records.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(key_count, kChunk)));
  Record previous;
  // A bad record is reported only after the file CRC is known: if the CRC fails too, the record
  // is just where the corruption showed first, and "checksum mismatch" is the accurate error.
  std::string record_error;
  for (std::uint64_t done = 0; done < key_count;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(key_count - done, kChunk));
    if (!src.read(buffer.data(), n * kIndexFileRecordBytes)) {
      throw FormatError(where + "truncated while reading record " + std::to_string(done));
    }
    crc = crc32c(buffer.data(), n * kIndexFileRecordBytes, crc);
    records.clear();
    for (std::size_t i = 0; i < n && record_error.empty(); ++i) {
      const Record r = decode_record(buffer.data() + i * kIndexFileRecordBytes, version);
      const std::string at = "record " + std::to_string(done + i) + ": ";
      if (r.ns > kMaxNamespace) {
        record_error = at + "namespace " + std::to_string(r.ns) + " exceeds the 24-bit limit " +
                       std::to_string(kMaxNamespace);
      } else if (r.group_id < 0 || r.group_id > kMaxIndexFileGroupId) {
        record_error = at + "group id " + std::to_string(r.group_id) + " is outside [0, " +
                       std::to_string(kMaxIndexFileGroupId) + "]";
      } else if (!BlockDigest::valid_size(r.digest_size)) {
        record_error =
            at + "digest width " + std::to_string(r.digest_size) + " is not 8, 16 or 32 bytes";
      } else if (!r.key.fits(r.digest_size)) {
        record_error = at + "a " + std::to_string(r.digest_size) +
                       "-byte digest has nonzero bytes past its width";
      } else if (done + i > 0 && !record_less(previous, r)) {
        record_error = at +
                       "records are not in strictly ascending order (duplicated or "
                       "reordered key)";
      } else {
        previous = r;
        ++stats.keys_per_namespace[r.ns];
        ++stats.keys_per_group[{r.ns, r.group_id}];
        ++stats.keys_per_digest_size[r.digest_size];
        records.push_back(r);
      }
    }
    if (record_error.empty()) {
      sink(records);
    } else if (key_count - done - n > kRecordsReadPastAnError) {
      // Reading on would only tell checksum corruption from a faulty writer; past this many
      // records (a sparse file on a file system without SEEK_HOLE) it is not worth the time.
      throw FormatError(where + record_error + " (the remaining " +
                        std::to_string(key_count - done - n) + " records were not read)");
    }
    done += n;
  }
  std::array<std::uint8_t, kIndexFileTrailerBytes> trailer{};
  if (!src.read(trailer.data(), trailer.size())) {
    throw FormatError(where + "truncated while reading the trailer");
  }
  const std::uint32_t stored_crc = get_u32(trailer.data());
  if (stored_crc != crc) {
    throw FormatError(where + "checksum mismatch over header and records (stored " +
                      hex32(stored_crc) + ", computed " + hex32(crc) + "): the file is corrupt");
  }
  if (!record_error.empty()) {
    throw FormatError(where + record_error + " (the checksum matches: the writer was faulty)");
  }
  // The format is canonical (one image per key set, so a save of a load reproduces the file):
  // version 2 is written only when some key is 8 or 16 bytes wide.
  if (version == kIndexFileVersionWithWidths &&
      stats.keys_per_digest_size.count(BlockDigest::kSize) == stats.keys_per_digest_size.size()) {
    throw FormatError(where + "a version " + std::to_string(version) +
                      " image without 8- or 16-byte keys (a writer uses version " +
                      std::to_string(kIndexFileVersion) +
                      " for that; the checksum matches: the writer was faulty)");
  }
  return stats;
}

/// Builds the fresh index, then swaps it in: `into` changes only after everything verified.
IndexFileStats load_from(ByteSource& src, const std::string& origin, BlockIndex& into) {
  std::optional<BlockIndex> fresh;
  // Sized for the whole file up front (the count is already checked against the file size, so
  // this allocation is proportional to bytes that exist), which saves the rehashes of growing.
  const auto begin = [&](std::uint64_t key_count) {
    BlockIndexOptions options = into.options();
    const double wanted = static_cast<double>(key_count) / options.max_load_factor + 1.0;
    constexpr std::size_t kMaxSlots = std::numeric_limits<std::size_t>::max() / 2;
    std::size_t slots =
        wanted >= static_cast<double>(kMaxSlots) ? kMaxSlots : static_cast<std::size_t>(wanted);
    if (options.max_capacity != 0) {
      slots = std::min(slots, options.max_capacity);
    }
    options.initial_capacity = std::max(options.initial_capacity, slots);
    fresh.emplace(options);
  };
  std::vector<std::int32_t> group_ids;
  std::vector<BlockDigest> keys;
  IndexFileStats stats = read_image(src, origin, begin, [&](const std::vector<Record>& records) {
    // Records are sorted by namespace, so each namespace is one contiguous run; a run goes in
    // as one insert per digest width.
    for (std::size_t first = 0; first < records.size();) {
      std::size_t end = first;
      while (end < records.size() && records[end].ns == records[first].ns) {
        ++end;
      }
      try {
        for (const std::uint32_t width : {32U, 16U, 8U}) {
          group_ids.clear();
          keys.clear();
          for (std::size_t i = first; i < end; ++i) {
            if (records[i].digest_size == width) {
              group_ids.push_back(records[i].group_id);
              keys.push_back(records[i].key);
            }
          }
          if (!keys.empty()) {
            fresh->insert(records[first].ns, span<const std::int32_t>(group_ids),
                          span<const BlockDigest>(keys), width);
          }
        }
      } catch (const InvalidArgument& e) {
        throw FormatError("index file '" + origin + "': the index rejected a record: " + e.what());
      } catch (const CapacityExceeded& e) {
        throw CapacityExceeded("index file '" + origin + "' does not fit the index: " + e.what());
      }
      first = end;
    }
  });
  into = std::move(*fresh);
  return stats;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) noexcept {
  const Crc32cTables& tab = crc_tables();
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint32_t c = ~crc;
  while (size >= 8) {
    const std::uint32_t lo = c ^ get_u32(p);
    const std::uint32_t hi = get_u32(p + 4);
    c = tab.t[7][lo & 0xFFU] ^ tab.t[6][(lo >> 8) & 0xFFU] ^ tab.t[5][(lo >> 16) & 0xFFU] ^
        tab.t[4][lo >> 24] ^ tab.t[3][hi & 0xFFU] ^ tab.t[2][(hi >> 8) & 0xFFU] ^
        tab.t[1][(hi >> 16) & 0xFFU] ^ tab.t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) {
    c = (c >> 8) ^ tab.t[0][(c ^ *p++) & 0xFFU];
  }
  return ~c;
}

IndexFileStats load_index(const std::string& path, BlockIndex& into) {
  FileSource src(path);
  return load_from(src, path, into);
}

IndexFileStats read_index_stats(const std::string& path) {
  FileSource src(path);
  return read_image(
      src, path, [](std::uint64_t) {}, [](const std::vector<Record>&) {});
}

IndexFileStats load_index_from_memory(const std::uint8_t* data, std::size_t size, BlockIndex& into,
                                      const std::string& origin) {
  MemorySource src(data, size);
  return load_from(src, origin, into);
}

IndexFileStats read_index_stats_from_memory(const std::uint8_t* data, std::size_t size,
                                            const std::string& origin) {
  MemorySource src(data, size);
  return read_image(
      src, origin, [](std::uint64_t) {}, [](const std::vector<Record>&) {});
}

}  // namespace prefixhit
