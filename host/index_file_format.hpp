// The index file's records and fields, shared by its reader (index_file.cpp) and its writer
// (index_file_save.cpp). Internal: the format is documented in include/prefixhit/index_file.hpp.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

#include "prefixhit/index_file.hpp"

namespace prefixhit::index_file_detail {

// ---- little-endian fields ----------------------------------------------------------------------

inline void put_u32(std::uint8_t* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

inline void put_u64(std::uint8_t* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

inline std::uint32_t get_u32(const std::uint8_t* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) {
    v = (v << 8) | p[i];
  }
  return v;
}

inline std::uint64_t get_u64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) {
    v = (v << 8) | p[i];
  }
  return v;
}

inline std::string os_error(const std::string& what, const std::string& path, int err) {
  return what + " '" + path + "': " + std::strerror(err);
}

// ---- records -----------------------------------------------------------------------------------

struct Record {
  Namespace ns = 0;
  std::int32_t group_id = 0;
  std::uint32_t digest_size = BlockDigest::kSize;
  BlockDigest key;
};

inline bool record_less(const Record& a, const Record& b) noexcept {
  return std::tie(a.ns, a.group_id, a.digest_size, a.key.bytes) <
         std::tie(b.ns, b.group_id, b.digest_size, b.key.bytes);
}

inline void encode_record(const Record& r, std::uint32_t version, std::uint8_t* p) noexcept {
  put_u32(p, r.ns);
  const auto group = static_cast<std::uint32_t>(r.group_id);
  put_u32(p + 4, version == kIndexFileVersion ? group : group | (r.digest_size << 8));
  std::memcpy(p + 8, r.key.bytes.data(), BlockDigest::kSize);
}

/// A version 2 record's width bits that are not one of 8, 16, 32 decode to digest_size 0 (or
/// another invalid value), which the reader reports.
inline Record decode_record(const std::uint8_t* p, std::uint32_t version) noexcept {
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

inline std::array<std::uint8_t, kIndexFileHeaderBytes> encode_header(
    std::uint64_t key_count, std::uint32_t version) noexcept {
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
inline const char* file_kind(mode_t mode) {
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

}  // namespace prefixhit::index_file_detail
