// Index persistence: the format is documented in include/prefixhit/index_file.hpp.
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

#include "prefixhit/errors.hpp"

namespace prefixhit {

namespace {

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

// ---- little-endian fields ----------------------------------------------------------------------

void put_u32(std::uint8_t* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

void put_u64(std::uint8_t* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

std::uint32_t get_u32(const std::uint8_t* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) {
    v = (v << 8) | p[i];
  }
  return v;
}

std::uint64_t get_u64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) {
    v = (v << 8) | p[i];
  }
  return v;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

std::string os_error(const std::string& what, const std::string& path, int err) {
  return what + " '" + path + "': " + std::strerror(err);
}

// ---- records -----------------------------------------------------------------------------------

struct Record {
  Namespace ns = 0;
  std::int32_t group_id = 0;
  std::uint32_t digest_size = BlockDigest::kSize;
  BlockDigest key;
};

bool record_less(const Record& a, const Record& b) noexcept {
  return std::tie(a.ns, a.group_id, a.digest_size, a.key.bytes) <
         std::tie(b.ns, b.group_id, b.digest_size, b.key.bytes);
}

void encode_record(const Record& r, std::uint32_t version, std::uint8_t* p) noexcept {
  put_u32(p, r.ns);
  const auto group = static_cast<std::uint32_t>(r.group_id);
  put_u32(p + 4, version == kIndexFileVersion ? group : group | (r.digest_size << 8));
  std::memcpy(p + 8, r.key.bytes.data(), BlockDigest::kSize);
}

/// A version 2 record's width bits that are not one of 8, 16, 32 decode to digest_size 0 (or
/// another invalid value), which the reader reports.
Record decode_record(const std::uint8_t* p, std::uint32_t version) noexcept {
  Record r;
  r.ns = get_u32(p);
  const std::uint32_t word = get_u32(p + 4);
  if (version == kIndexFileVersion) {
    r.group_id = static_cast<std::int32_t>(word);
  } else {
    r.group_id = (word >> 16) != 0 ? -1 : static_cast<std::int32_t>(word & 0xFFU);
    r.digest_size = (word >> 8) & 0xFFU;
  }
  std::memcpy(r.key.bytes.data(), p + 8, BlockDigest::kSize);
  return r;
}

std::array<std::uint8_t, kIndexFileHeaderBytes> encode_header(std::uint64_t key_count,
                                                              std::uint32_t version) noexcept {
  std::array<std::uint8_t, kIndexFileHeaderBytes> h{};
  std::memcpy(h.data(), kIndexFileMagic, sizeof(kIndexFileMagic));
  put_u32(h.data() + 8, version);
  put_u32(h.data() + 12, static_cast<std::uint32_t>(kIndexFileHeaderBytes));
  put_u32(h.data() + 16, static_cast<std::uint32_t>(kIndexFileRecordBytes));
  put_u32(h.data() + 20, 0);
  put_u64(h.data() + 24, key_count);
  put_u32(h.data() + 32, 0);
  put_u32(h.data() + 36, crc32c(h.data(), 36));
  return h;
}

/// Every key of the index, sorted: the canonical record order.
std::vector<Record> snapshot(const BlockIndex& index) {
  std::vector<Record> records;
  records.reserve(index.size());
  index.for_each_key(
      [&](Namespace ns, int group_id, std::size_t digest_size, const BlockDigest& key) {
        records.push_back(Record{ns, static_cast<std::int32_t>(group_id),
                                 static_cast<std::uint32_t>(digest_size), key});
      });
  std::sort(records.begin(), records.end(), record_less);
  return records;
}

/// Version 1 while every key is 32 bytes (readable by builds without widths), else version 2.
std::uint32_t file_version(const std::vector<Record>& records) {
  const bool narrow = std::any_of(records.begin(), records.end(), [](const Record& r) {
    return r.digest_size != BlockDigest::kSize;
  });
  return narrow ? kIndexFileVersionWithWidths : kIndexFileVersion;
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

/// A file descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  /// Closes now and reports close's error (which for writes can be the first sign of ENOSPC).
  int close() noexcept {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

/// What kind of file system object a mode is, for "not a regular file" messages.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) {
    return "a directory";
  }
  if (S_ISLNK(mode)) {
    return "a symbolic link";
  }
  if (S_ISFIFO(mode)) {
    return "a FIFO";
  }
  if (S_ISCHR(mode) || S_ISBLK(mode)) {
    return "a device";
  }
  if (S_ISSOCK(mode)) {
    return "a socket";
  }
  return "not a regular file";
}

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

// ---- writing -----------------------------------------------------------------------------------

void write_all(int fd, const std::uint8_t* data, std::size_t size, const std::string& path) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t put = ::write(fd, data + done, size - done);
    if (put < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw IoError(os_error("cannot write temporary index file", path, errno));
    }
    done += static_cast<std::size_t>(put);
  }
}

std::string parent_dir(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Temporary files are "<name>.tmp.<pid>.<8 hex digits>" beside the target; <name> is cut so
/// that the whole name fits NAME_MAX (a target name near 255 bytes still saves).
constexpr std::size_t kNameMax = 255;
constexpr std::size_t kTempSuffixMax = 5 + 10 + 1 + 8;  // ".tmp." pid "." hex

std::string temp_stem(const std::string& path) {
  const std::string base = base_name(path);
  const std::string dir_part = path.substr(0, path.size() - base.size());
  return dir_part + base.substr(0, std::min(base.size(), kNameMax - kTempSuffixMax)) + ".tmp.";
}

/// Whether `name` is "<stem>.tmp.<pid>.<8 hex>" for this target's stem; returns the pid.
std::optional<long> temp_owner(const std::string& name, const std::string& stem_name) {
  if (name.size() <= stem_name.size() || name.compare(0, stem_name.size(), stem_name) != 0) {
    return std::nullopt;
  }
  const std::string rest = name.substr(stem_name.size());
  const std::size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string::npos || dot > 10 || rest.size() - dot - 1 != 8) {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    const bool ok = i < dot ? (c >= '0' && c <= '9')
                            : i == dot || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (!ok) {
      return std::nullopt;
    }
  }
  return std::stol(rest.substr(0, dot));
}

/// Removes temporary files of earlier saves to the same target whose writer died (kill -9,
/// power loss): the owner's pid is gone and nobody holds the file's lock (a live saver holds
/// it, see save_index). Best effort: anything unexpected is left alone.
void remove_stale_temporaries(const std::string& path) {
  const std::string stem = temp_stem(path);
  const std::string dir = parent_dir(path);
  const std::string stem_name = base_name(stem);
  DIR* folder = ::opendir(dir.c_str());
  if (folder == nullptr) {
    return;
  }
  std::vector<std::string> stale;
  while (const dirent* entry = ::readdir(folder)) {
    const std::string name = entry->d_name;
    const std::optional<long> pid = temp_owner(name, stem_name);
    if (!pid || *pid == static_cast<long>(::getpid())) {
      continue;
    }
    if (::kill(static_cast<pid_t>(*pid), 0) == 0 || errno != ESRCH) {
      continue;  // the writer may still be running
    }
    stale.push_back(name);
  }
  ::closedir(folder);
  for (const std::string& name : stale) {
    const std::string full = dir + "/" + name;
    Fd fd(::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st {};
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      continue;
    }
    ::unlink(full.c_str());
  }
}

/// Blocks SIGXFSZ on this thread while a save writes, so that a file size limit (ulimit -f)
/// makes write() fail with EFBIG, an IoError, instead of killing the process. A SIGXFSZ the
/// save itself raised is consumed before the mask is restored.
class SigxfszBlock {
 public:
  SigxfszBlock() noexcept {
    sigset_t only{};
    sigemptyset(&only);
    sigaddset(&only, SIGXFSZ);
    active_ = ::pthread_sigmask(SIG_BLOCK, &only, &old_) == 0 && sigismember(&old_, SIGXFSZ) == 0;
    sigset_t pending{};
    was_pending_ = ::sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1;
  }
  ~SigxfszBlock() {
    if (!active_) {
      return;
    }
    sigset_t only{};
    sigemptyset(&only);
    sigaddset(&only, SIGXFSZ);
    sigset_t pending{};
    if (!was_pending_ && ::sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1) {
      const timespec now{0, 0};
      ::sigtimedwait(&only, nullptr, &now);
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigxfszBlock(const SigxfszBlock&) = delete;
  SigxfszBlock& operator=(const SigxfszBlock&) = delete;

 private:
  sigset_t old_{};
  bool active_ = false;
  bool was_pending_ = false;
};

/// Removes the temporary file unless the save reached the rename.
struct TempFileGuard {
  std::string path;
  bool armed = true;
  ~TempFileGuard() {
    if (armed) {
      ::unlink(path.c_str());
    }
  }
};

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

std::vector<std::uint8_t> serialize_index(const BlockIndex& index) {
  const std::vector<Record> records = snapshot(index);
  std::vector<std::uint8_t> out(kIndexFileHeaderBytes + records.size() * kIndexFileRecordBytes +
                                kIndexFileTrailerBytes);
  const std::uint32_t version = file_version(records);
  const auto header = encode_header(records.size(), version);
  std::memcpy(out.data(), header.data(), header.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    encode_record(records[i], version,
                  out.data() + kIndexFileHeaderBytes + i * kIndexFileRecordBytes);
  }
  const std::size_t body = out.size() - kIndexFileTrailerBytes;
  put_u32(out.data() + body, crc32c(out.data(), body));
  return out;
}

IndexFileStats save_index(const BlockIndex& index, const std::string& path) {
  if (path.empty()) {
    throw IoError("save_index: empty path");
  }
  // Only a regular file (or nothing) is replaced: rename would silently turn a device node,
  // FIFO or symlink into a regular file, and cannot replace a directory.
  struct stat target {};
  const bool exists = ::lstat(path.c_str(), &target) == 0;
  if (!exists && errno != ENOENT) {
    throw IoError(os_error("cannot inspect the save target", path, errno));
  }
  if (exists && !S_ISREG(target.st_mode)) {
    throw IoError("refusing to save over '" + path + "': it is " + file_kind(target.st_mode) +
                  ", not a regular file");
  }
  const std::vector<Record> records = snapshot(index);
  const std::string dir = parent_dir(path);
  remove_stale_temporaries(path);
  const SigxfszBlock no_sigxfsz;

  // A unique name in the target's folder: rename is atomic only within one file system.
  std::random_device rd;
  TempFileGuard guard;
  int raw = -1;
  const std::string stem = temp_stem(path);
  for (int attempt = 0; raw < 0; ++attempt) {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), "%ld.%08x", static_cast<long>(::getpid()), rd());
    guard.path = stem + suffix;
    raw = ::open(guard.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (raw < 0 && (errno != EEXIST || attempt >= 16)) {
      guard.armed = false;  // nothing was created
      throw IoError(os_error("cannot create temporary index file", guard.path, errno));
    }
  }
  Fd fd(raw);
  // Held until the rename: tells remove_stale_temporaries that this writer is alive.
  ::flock(fd.get(), LOCK_EX | LOCK_NB);
  if (exists) {
    // The replacement keeps the old file's permissions (and owner, where allowed).
    // Not permitted for others' files unless privileged; the permissions still carry over.
    const int chown_rc = ::fchown(fd.get(), target.st_uid, target.st_gid);
    static_cast<void>(chown_rc);
    if (::fchmod(fd.get(), target.st_mode & 07777) != 0) {
      throw IoError(
          os_error("cannot set the permissions of temporary index file", guard.path, errno));
    }
  }

  IndexFileStats stats;
  stats.format_version = file_version(records);
  stats.key_count = records.size();
  const auto header = encode_header(records.size(), stats.format_version);
  write_all(fd.get(), header.data(), header.size(), guard.path);
  std::uint32_t crc = crc32c(header.data(), header.size());
  constexpr std::size_t kChunk = 4096;
  std::vector<std::uint8_t> buffer(kChunk * kIndexFileRecordBytes);
  for (std::size_t done = 0; done < records.size();) {
    const std::size_t n = std::min(kChunk, records.size() - done);
    for (std::size_t i = 0; i < n; ++i) {
      const Record& r = records[done + i];
      encode_record(r, stats.format_version, buffer.data() + i * kIndexFileRecordBytes);
      ++stats.keys_per_namespace[r.ns];
      ++stats.keys_per_group[{r.ns, r.group_id}];
      ++stats.keys_per_digest_size[r.digest_size];
    }
    crc = crc32c(buffer.data(), n * kIndexFileRecordBytes, crc);
    write_all(fd.get(), buffer.data(), n * kIndexFileRecordBytes, guard.path);
    done += n;
  }
  std::array<std::uint8_t, kIndexFileTrailerBytes> trailer{};
  put_u32(trailer.data(), crc);
  write_all(fd.get(), trailer.data(), trailer.size(), guard.path);
  stats.file_bytes =
      kIndexFileHeaderBytes + records.size() * kIndexFileRecordBytes + kIndexFileTrailerBytes;

  // The data must be on disk before the rename can make it visible under the real name;
  // otherwise a crash could leave a renamed but empty or partial file.
  if (::fsync(fd.get()) != 0) {
    throw IoError(os_error("cannot fsync temporary index file", guard.path, errno));
  }
  if (fd.close() != 0) {
    throw IoError(os_error("cannot close temporary index file", guard.path, errno));
  }
  if (::rename(guard.path.c_str(), path.c_str()) != 0) {
    throw IoError(os_error("cannot rename temporary index file over", path, errno));
  }
  guard.armed = false;
  // The rename lives in the folder's entries: fsync the folder so it survives a crash too.
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) {
    throw IoError(os_error("saved, but cannot open the folder to fsync it", dir, errno));
  }
  if (::fsync(dir_fd.get()) != 0) {
    throw IoError(os_error("saved, but cannot fsync the folder", dir, errno));
  }
  return stats;
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
