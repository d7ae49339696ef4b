// Index persistence, the writer: a canonical image, saved through a temporary file, fsync and
// rename. The format is documented in include/prefixhit/index_file.hpp.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "host/index_file_format.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/index_file.hpp"

namespace prefixhit {

namespace {

using namespace index_file_detail;  // NOLINT(google-build-using-namespace): this file's own format

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

}  // namespace prefixhit
