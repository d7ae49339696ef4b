// Index persistence (include/prefixhit/index_file.hpp): round trips keep every key; truncated,
// corrupted, wrong-magic, wrong-version, empty and absurd files give clear typed errors and leave
// the target index untouched; a failed or interrupted save leaves the old file whole.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/index_file.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

namespace fs = std::filesystem;
using testing::random_digest;
using testing::seed_note;
using testing::test_seed;

using Key = std::tuple<Namespace, int, BlockDigest>;

std::set<Key> contents(const BlockIndex& index) {
  std::set<Key> out;
  index.for_each([&](Namespace ns, int g, const BlockDigest& d) { out.emplace(ns, g, d); });
  return out;
}

/// A fresh temporary folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "prefixhit-index-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, ec);
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }
  /// Names in the folder other than `keep` (leftover temporary files).
  std::vector<std::string> others(const std::string& keep) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) {
      if (e.path().filename() != keep) {
        out.push_back(e.path().filename().string());
      }
    }
    return out;
  }

 private:
  std::string path_;
};

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void put_u32(std::vector<std::uint8_t>& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

void put_u64(std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

/// Recomputes both CRCs, so that a test reaches the checks behind them.
void fix_checksums(std::vector<std::uint8_t>& b) {
  put_u32(b, 36, crc32c(b.data(), 36));
  const std::size_t body = b.size() - kIndexFileTrailerBytes;
  put_u32(b, body, crc32c(b.data(), body));
}

/// A random index over several namespaces (including the largest) and groups.
BlockIndex random_index(std::mt19937_64& rng, std::size_t keys) {
  BlockIndex index;
  const Namespace namespaces[] = {0, 1, 7, 4096, kMaxNamespace};
  for (std::size_t i = 0; i < keys; ++i) {
    const Namespace ns = namespaces[rng() % 5];
    const int group = static_cast<int>(rng() % kMaxGroups);
    const BlockDigest d = random_digest(rng);
    index.insert(ns, group, span<const BlockDigest>(&d, 1));
  }
  return index;
}

/// The target of a failing load: a few keys that must survive every rejected file.
BlockIndex make_target(std::set<Key>& model) {
  BlockIndexOptions small;  // loads build a fresh index with these options: keep them cheap
  small.initial_capacity = 32;
  BlockIndex target(small);
  BlockDigest d;
  for (int i = 0; i < 5; ++i) {
    d.bytes.fill(static_cast<std::uint8_t>(0xC0 + i));
    target.insert(42, i, span<const BlockDigest>(&d, 1));
    model.emplace(42, i, d);
  }
  return target;
}

/// Expects `path` to be rejected with `Kind`, the message naming `needle`, `target` untouched.
template <class Kind>
void expect_rejected(const std::string& path, const std::string& needle, const std::string& why) {
  std::set<Key> model;
  BlockIndex target = make_target(model);
  try {
    load_index(path, target);
    ADD_FAILURE() << why << ": load_index accepted the file";
  } catch (const Kind& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << why << ": message \"" << e.what() << "\" does not mention \"" << needle << "\"";
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos)
        << why << ": message does not name the file: " << e.what();
  }
  EXPECT_EQ(contents(target), model) << why << ": the target index changed";
  EXPECT_THROW(read_index_stats(path), Kind) << why;
}

TEST(IndexFile, RoundTripKeepsEveryKey) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  for (std::size_t keys : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4097},
                           std::size_t{20000} + rng() % 5000}) {
    SCOPED_TRACE("keys " + std::to_string(keys));
    const BlockIndex original = random_index(rng, keys);
    const std::set<Key> expected = contents(original);
    const std::string path = dir.file("index.pfx");
    const IndexFileStats saved = save_index(original, path);
    EXPECT_EQ(saved.key_count, expected.size());
    EXPECT_EQ(saved.file_bytes, fs::file_size(path));
    EXPECT_EQ(fs::file_size(path), kIndexFileHeaderBytes + expected.size() * kIndexFileRecordBytes +
                                       kIndexFileTrailerBytes);
    EXPECT_TRUE(dir.others("index.pfx").empty()) << "a temporary file was left behind";

    // Loading replaces whatever the target held.
    BlockIndex loaded;
    BlockDigest stale;
    stale.bytes.fill(0xEE);
    loaded.insert(3, 3, span<const BlockDigest>(&stale, 1));
    const IndexFileStats stats = load_index(path, loaded);
    EXPECT_EQ(contents(loaded), expected);
    EXPECT_EQ(loaded.size(), expected.size());
    EXPECT_EQ(stats.key_count, expected.size());
    EXPECT_EQ(stats.format_version, kIndexFileVersion);

    // Per-namespace and per-group counts agree with the keys.
    std::map<Namespace, std::uint64_t> per_ns;
    std::map<std::pair<Namespace, int>, std::uint64_t> per_group;
    for (const auto& [ns, g, d] : expected) {
      ++per_ns[ns];
      ++per_group[{ns, g}];
    }
    EXPECT_EQ(stats.keys_per_namespace, per_ns);
    EXPECT_EQ(stats.keys_per_group, per_group);
    const IndexFileStats read = read_index_stats(path);
    EXPECT_EQ(read.keys_per_group, per_group);

    // The format is canonical: the same keys give the same bytes, whatever the table layout.
    EXPECT_EQ(read_bytes(path), serialize_index(loaded));
    EXPECT_EQ(read_bytes(path), serialize_index(original));
  }
}

TEST(IndexFile, SaveOverwritesAnOlderFile) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string path = dir.file("index.pfx");
  save_index(random_index(rng, 300), path);
  const BlockIndex second = random_index(rng, 100);
  save_index(second, path);
  BlockIndex loaded;
  load_index(path, loaded);
  EXPECT_EQ(contents(loaded), contents(second));
  EXPECT_TRUE(dir.others("index.pfx").empty());
}

TEST(IndexFile, TruncatedFilesAreRejectedAndTheTargetIsUntouched) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::vector<std::uint8_t> image = serialize_index(random_index(rng, 50));
  const std::string path = dir.file("cut.pfx");
  // Every offset inside the header and near the ends, every few bytes elsewhere.
  for (std::size_t len = 0; len < image.size();
       len += (len < 64 || len + 64 > image.size()) ? 1 : 1 + rng() % 7) {
    write_bytes(path, std::vector<std::uint8_t>(image.begin(),
                                                image.begin() + static_cast<std::ptrdiff_t>(len)));
    const std::string needle = len == 0 ? "empty" : "truncated";
    expect_rejected<FormatError>(path, needle, "truncated to " + std::to_string(len) + " bytes");
  }
}

TEST(IndexFile, FlippedBitsAreRejectedAndTheTargetIsUntouched) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::vector<std::uint8_t> image = serialize_index(random_index(rng, 40));
  const std::string path = dir.file("flipped.pfx");
  for (std::size_t at = 0; at < image.size(); ++at) {
    std::vector<std::uint8_t> bad = image;
    bad[at] ^= static_cast<std::uint8_t>(1U << (rng() % 8));
    write_bytes(path, bad);
    std::set<Key> model;
    BlockIndex target = make_target(model);
    try {
      load_index(path, target);
      ADD_FAILURE() << "a flipped bit at byte " << at << " was not detected";
    } catch (const FormatError& e) {
      const std::string what = e.what();
      // Which check fires depends on the field; each names what is wrong.
      const bool clear = what.find("checksum") != std::string::npos ||
                         what.find("magic") != std::string::npos ||
                         what.find("version") != std::string::npos;
      EXPECT_TRUE(clear) << "byte " << at << ": unclear message: " << what;
    }
    EXPECT_EQ(contents(target), model) << "byte " << at;
  }
}

TEST(IndexFile, WrongMagicVersionAndEmptyFile) {
  TempDir dir;
  BlockIndex small;
  BlockDigest d;
  d.bytes.fill(1);
  small.insert(1, 1, span<const BlockDigest>(&d, 1));
  const std::vector<std::uint8_t> image = serialize_index(small);

  write_bytes(dir.file("empty.pfx"), {});
  expect_rejected<FormatError>(dir.file("empty.pfx"), "empty", "empty file");

  std::vector<std::uint8_t> magic = image;
  magic[0] = 'X';
  write_bytes(dir.file("magic.pfx"), magic);
  expect_rejected<FormatError>(dir.file("magic.pfx"), "bad magic", "wrong magic");

  const std::string json = R"({"format":"prefixhit-conformance/1","cases":[]})";
  write_bytes(dir.file("json.pfx"), std::vector<std::uint8_t>(json.begin(), json.end()));
  expect_rejected<FormatError>(dir.file("json.pfx"), "not a prefixhit index", "a JSON file");

  for (std::uint32_t version : {0U, 3U, 0xFFFFFFFFU}) {
    std::vector<std::uint8_t> v = image;
    put_u32(v, 8, version);
    fix_checksums(v);
    write_bytes(dir.file("version.pfx"), v);
    expect_rejected<FormatError>(dir.file("version.pfx"),
                                 "unsupported format version " + std::to_string(version),
                                 "version " + std::to_string(version));
  }

  // Version 2 is written only when a key is 8 or 16 bytes wide, so an image is canonical (a save
  // of a load reproduces it): a version 2 image of 32-byte keys only, or of none, is refused.
  // The fuzzer found the empty one accepted, and saved back as version 1.
  std::vector<std::uint8_t> empty_v2 = serialize_index(BlockIndex{});
  put_u32(empty_v2, 8, kIndexFileVersionWithWidths);
  fix_checksums(empty_v2);
  write_bytes(dir.file("empty-v2.pfx"), empty_v2);
  expect_rejected<FormatError>(dir.file("empty-v2.pfx"), "without 8- or 16-byte keys",
                               "an empty version 2 image");
  std::vector<std::uint8_t> wide_v2 = image;
  put_u32(wide_v2, 8, kIndexFileVersionWithWidths);
  put_u32(wide_v2, kIndexFileHeaderBytes + 4, 1U | (32U << 8));  // group 1, width 32
  fix_checksums(wide_v2);
  write_bytes(dir.file("wide-v2.pfx"), wide_v2);
  expect_rejected<FormatError>(dir.file("wide-v2.pfx"), "without 8- or 16-byte keys",
                               "a version 2 image of 32-byte keys");
}

TEST(IndexFile, AbsurdCountsNeverSizeAnAllocation) {
  TempDir dir;
  const std::vector<std::uint8_t> image = serialize_index(BlockIndex{});
  for (std::uint64_t count : {std::uint64_t{1} << 40, std::uint64_t{1} << 61,
                              ~std::uint64_t{0} / 40, ~std::uint64_t{0}}) {
    std::vector<std::uint8_t> bad = image;
    put_u64(bad, 24, count);
    fix_checksums(bad);
    write_bytes(dir.file("absurd.pfx"), bad);
    // The count is checked against the file size before anything is allocated; under ASan a
    // huge allocation would abort the test.
    const std::string needle =
        count > (~std::uint64_t{0} - 44) / 40 ? "absurd key count" : "truncated";
    expect_rejected<FormatError>(dir.file("absurd.pfx"), needle, "count " + std::to_string(count));
  }
}

TEST(IndexFile, StructurallyBadRecordsAreRejected) {
  TempDir dir;
  BlockIndex two;
  BlockDigest a;
  BlockDigest b;
  a.bytes.fill(1);
  b.bytes.fill(2);
  two.insert(5, 1, span<const BlockDigest>(&a, 1));
  two.insert(5, 1, span<const BlockDigest>(&b, 1));
  const std::vector<std::uint8_t> image = serialize_index(two);
  const std::size_t r0 = kIndexFileHeaderBytes;
  const std::size_t r1 = kIndexFileHeaderBytes + kIndexFileRecordBytes;
  struct Case {
    std::string name;
    std::function<void(std::vector<std::uint8_t>&)> edit;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"swapped records",
       [&](std::vector<std::uint8_t>& v) {
         std::swap_ranges(v.begin() + static_cast<std::ptrdiff_t>(r0),
                          v.begin() + static_cast<std::ptrdiff_t>(r1),
                          v.begin() + static_cast<std::ptrdiff_t>(r1));
       },
       "ascending order"},
      {"duplicated record",
       [&](std::vector<std::uint8_t>& v) {
         std::copy(v.begin() + static_cast<std::ptrdiff_t>(r0),
                   v.begin() + static_cast<std::ptrdiff_t>(r1),
                   v.begin() + static_cast<std::ptrdiff_t>(r1));
       },
       "ascending order"},
      {"namespace over 24 bits", [&](std::vector<std::uint8_t>& v) { put_u32(v, r1, 1U << 24); },
       "namespace 16777216"},
      {"negative group id", [&](std::vector<std::uint8_t>& v) { put_u32(v, r0 + 4, 0xFFFFFFFFU); },
       "group id -1"},
      {"group id past kMaxGroups",
       [&](std::vector<std::uint8_t>& v) { put_u32(v, r1 + 4, kMaxGroups); }, "group id 32"},
      {"flags set", [&](std::vector<std::uint8_t>& v) { put_u32(v, 20, 1); }, "flags"},
      {"record size", [&](std::vector<std::uint8_t>& v) { put_u32(v, 16, 48); }, "record sizes"},
      {"trailing bytes", [&](std::vector<std::uint8_t>& v) { v.insert(v.end() - 4, 40, 0); },
       "unexpected bytes"},
  };
  for (const Case& c : cases) {
    std::vector<std::uint8_t> bad = image;
    c.edit(bad);
    fix_checksums(bad);
    write_bytes(dir.file("bad.pfx"), bad);
    expect_rejected<FormatError>(dir.file("bad.pfx"), c.needle, c.name);
  }
}

TEST(IndexFile, OsErrorsAreIoErrors) {
  TempDir dir;
  std::set<Key> model;
  BlockIndex target = make_target(model);
  EXPECT_THROW(load_index(dir.file("missing.pfx"), target), IoError);
  EXPECT_THROW(load_index(dir.path(), target), IoError);  // a folder, not a file
  EXPECT_THROW(read_index_stats(dir.file("missing.pfx")), IoError);
  EXPECT_THROW(save_index(target, dir.file("no/such/folder/index.pfx")), IoError);
  EXPECT_THROW(save_index(target, ""), IoError);
  EXPECT_EQ(contents(target), model);
}

TEST(IndexFile, ALoadThatDoesNotFitLeavesTheTargetUntouched) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  save_index(random_index(rng, 500), dir.file("big.pfx"));
  BlockIndexOptions options;
  options.initial_capacity = 32;
  options.max_capacity = 256;  // at most ~200 keys
  BlockIndex target(options);
  BlockDigest d;
  d.bytes.fill(9);
  target.insert(1, 2, span<const BlockDigest>(&d, 1));
  const std::set<Key> before = contents(target);
  EXPECT_THROW(load_index(dir.file("big.pfx"), target), CapacityExceeded);
  EXPECT_EQ(contents(target), before);
  EXPECT_EQ(target.options().max_capacity, 256U);
}

/// The old file stays whole when a save fails: here the write itself fails (RLIMIT_FSIZE makes
/// write() return EFBIG even for root), and, when not root, because the folder is read-only.
TEST(IndexFile, AFailedSaveKeepsTheOldFileWhole) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string path = dir.file("index.pfx");
  const BlockIndex old_index = random_index(rng, 100);
  save_index(old_index, path);
  const std::vector<std::uint8_t> old_bytes = read_bytes(path);
  const BlockIndex bigger = random_index(rng, 5000);  // 200 KB, over the limit below

  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    save_index(bigger, path);
  } catch (const IoError& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("cannot write"), std::string::npos) << e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw) << "the save past RLIMIT_FSIZE did not fail";
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_TRUE(dir.others("index.pfx").empty()) << "the temporary file was not removed";

  if (::geteuid() != 0) {
    fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(save_index(bigger, path), IoError);
    fs::permissions(dir.path(), fs::perms::owner_all);
    EXPECT_EQ(read_bytes(path), old_bytes);
  }
  BlockIndex loaded;
  load_index(path, loaded);
  EXPECT_EQ(contents(loaded), contents(old_index));
}

/// A crash mid-save: a child process starts saving a large index and is killed with SIGKILL as
/// soon as its temporary file appears. The target must then be the old file or the new one,
/// whole - never a mix or a partial file.
TEST(IndexFile, AKilledSaveLeavesTheOldFileWhole) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string path = dir.file("index.pfx");
  const BlockIndex old_index = random_index(rng, 200);
  save_index(old_index, path);
  const std::set<Key> old_keys = contents(old_index);
  const BlockIndex new_index = random_index(rng, 300000);  // 12 MB: the save takes a while
  const std::set<Key> new_keys = contents(new_index);
  int killed_mid_save = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        save_index(new_index, path);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    bool saw_temp = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<std::string> others = dir.others("index.pfx");
      if (!others.empty()) {
        saw_temp = true;
        break;
      }
      int status = 0;
      if (::waitpid(child, &status, WNOHANG) == child) {
        break;  // finished before we saw its temporary file
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    killed_mid_save += saw_temp && WIFSIGNALED(status) ? 1 : 0;

    BlockIndex loaded;
    ASSERT_NO_THROW(load_index(path, loaded)) << "attempt " << attempt;
    const std::set<Key> keys = contents(loaded);
    EXPECT_TRUE(keys == old_keys || keys == new_keys) << "attempt " << attempt;
    // A crash may leave the temporary file behind; it never replaces the target by itself.
    for (const std::string& name : dir.others("index.pfx")) {
      fs::remove(dir.file(name));
    }
    save_index(old_index, path);
  }
  EXPECT_GT(killed_mid_save, 0) << "no attempt was killed while its save was in progress";
}

TEST(IndexFile, Crc32cMatchesTheStandardCheckValue) {
  // CRC-32C("123456789") = 0xE3069283 (RFC 3720 and every CRC catalogue).
  const char* text = "123456789";
  EXPECT_EQ(crc32c(text, 9), 0xE3069283U);
  // Chaining equals one pass, at every split (covers the 8-byte and tail paths).
  for (std::size_t split = 0; split <= 9; ++split) {
    EXPECT_EQ(crc32c(text + split, 9 - split, crc32c(text, split)), 0xE3069283U) << split;
  }
}

}  // namespace
}  // namespace prefixhit
