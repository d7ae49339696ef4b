// Index files under hostile use (issue 13, item 4 and 6): FIFOs and sparse files are refused
// before they can block or cost minutes; saves refuse non-regular targets, keep the old file's
// mode, clean up temporaries of dead savers, survive `ulimit -f` and names near 255 bytes.
// Anything that could hang runs in a child process with a deadline.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/index_file.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

namespace fs = std::filesystem;
using testing::random_hashes;
using testing::seed_note;
using testing::test_seed;

class Folder {
 public:
  Folder() {
    std::string pattern = (fs::temp_directory_path() / "prefixhit-hostile-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = pattern;
  }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) {
      out.push_back(e.path().filename().string());
    }
    return out;
  }

 private:
  std::string path_;
};

/// Runs `body` in a child process; returns its exit code, or -signal, or -1000 if it did not
/// finish within `seconds` (then it is killed).
int run_child(const std::function<int()>& body, int seconds = 10) {
  const pid_t child = ::fork();
  if (child == 0) {
    int rc = 99;
    try {
      rc = body();
    } catch (...) {
      rc = 98;
    }
    ::_exit(rc);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

/// 0 if `f` throws E whose message has `needle`, else a distinct non-zero code.
template <class E>
int throws(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    return 1;
  } catch (const E& e) {
    return std::string(e.what()).find(needle) != std::string::npos ? 0 : 2;
  } catch (...) {
    return 3;
  }
}

BlockIndex small_index(std::mt19937_64& rng, std::size_t n) {
  BlockIndex index;
  index.insert(3, 1, random_hashes(rng, n));
  return index;
}

TEST(IndexFileHostile, AFifoIsRefusedInsteadOfBlocking) {
  Folder dir;
  const std::string fifo = dir.file("index.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Before: open() waited for a writer forever.
  EXPECT_EQ(run_child([&] {
              BlockIndex index;
              return throws<IoError>([&] { load_index(fifo, index); }, "FIFO");
            }),
            0);
  EXPECT_EQ(run_child([&] { return throws<IoError>([&] { read_index_stats(fifo); }, "FIFO"); }), 0);
  EXPECT_EQ(run_child([&] {
              return throws<IoError>([&] { read_index_stats(dir.file("")); }, "directory");
            }),
            0);
}

/// A file whose header (valid CRC) declares `keys` records, extended to the matching size
/// with a hole: what a crafted or badly copied file looks like.
bool write_sparse(const std::string& path, std::uint64_t keys) {
  BlockIndex empty;
  std::vector<std::uint8_t> image = serialize_index(empty);
  for (int i = 0; i < 8; ++i) {
    image[24 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(keys >> (8 * i));
  }
  const std::uint32_t crc = crc32c(image.data(), 36);
  for (int i = 0; i < 4; ++i) {
    image[36 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(crc >> (8 * i));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return false;
  }
  const bool ok = ::write(fd, image.data(), kIndexFileHeaderBytes) ==
                      static_cast<ssize_t>(kIndexFileHeaderBytes) &&
                  ::ftruncate(fd, static_cast<off_t>(44 + 40 * keys)) == 0;
  ::close(fd);
  return ok;
}

TEST(IndexFileHostile, SparseFilesDeclaringBillionsOfKeysAreFormatErrorsAtOnce) {
  Folder dir;
  int tried = 0;
  for (const int log2 : {28, 30, 33}) {
    const std::string path = dir.file("sparse" + std::to_string(log2) + ".pfx");
    if (!write_sparse(path, std::uint64_t{1} << log2)) {
      continue;  // the file system cannot hold a file that large, even sparse
    }
    ++tried;
    // Before: minutes and gigabytes, then capacity_exceeded for what is corrupt.
    EXPECT_EQ(
        run_child([&] { return throws<FormatError>([&] { read_index_stats(path); }, "sparse"); }),
        0)
        << "2^" << log2 << " keys (stats)";
    EXPECT_EQ(run_child([&] {
                BlockIndex index;
                return throws<FormatError>([&] { load_index(path, index); }, "sparse");
              }),
              0)
        << "2^" << log2 << " keys (load)";
    fs::remove(path);
  }
  if (tried == 0) {
    GTEST_SKIP() << "no sparse file could be made in " << fs::temp_directory_path();
  }
}

TEST(IndexFileHostile, SaveRefusesNonRegularTargetsAndLeavesThemAlone) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const BlockIndex index = small_index(rng, 10);
  Folder dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string sub = dir.file("sub");
  fs::create_directory(sub);
  const std::string real = dir.file("real.pfx");
  save_index(index, real);
  const std::string link = dir.file("link.pfx");
  fs::create_symlink(real, link);
  EXPECT_EQ(throws<IoError>([&] { save_index(index, fifo); }, "FIFO"), 0);
  EXPECT_EQ(throws<IoError>([&] { save_index(index, sub); }, "directory"), 0);
  EXPECT_EQ(throws<IoError>([&] { save_index(index, link); }, "symbolic link"), 0);
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_TRUE(fs::is_directory(sub));
  if (::geteuid() == 0) {
    // As root a device node used to become a regular file.
    const std::string dev = dir.file("null");
    if (::mknod(dev.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0) {
      EXPECT_EQ(throws<IoError>([&] { save_index(index, dev); }, "device"), 0);
      ASSERT_EQ(::lstat(dev.c_str(), &st), 0);
      EXPECT_TRUE(S_ISCHR(st.st_mode));
    }
  }
  for (const std::string& name : dir.names()) {
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << "left behind: " << name;
  }
}

TEST(IndexFileHostile, SaveKeepsTheOldFilesMode) {
  std::mt19937_64 rng(test_seed());
  Folder dir;
  const std::string path = dir.file("private.pfx");
  save_index(small_index(rng, 5), path);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  save_index(small_index(rng, 7), path);  // came back 0644 before
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600U);
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  save_index(small_index(rng, 3), path);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640U);
}

TEST(IndexFileHostile, StaleTemporariesOfDeadSavesAreRemovedOnTheNextSave) {
  std::mt19937_64 rng(test_seed());
  Folder dir;
  const std::string path = dir.file("index.pfx");
  // A pid that is certainly dead: a child that has exited and been reaped.
  const pid_t dead = ::fork();
  if (dead == 0) {
    ::_exit(0);
  }
  ::waitpid(dead, nullptr, 0);
  const std::string stale = "index.pfx.tmp." + std::to_string(dead) + ".0badf00d";
  const std::string live = "index.pfx.tmp." + std::to_string(::getppid()) + ".0000abcd";
  const std::string other_target = "other.pfx.tmp." + std::to_string(dead) + ".0badf00d";
  const std::string unrelated = "index.pfx.tmp.notes";
  for (const std::string& name : {stale, live, other_target, unrelated}) {
    std::vector<std::uint8_t> junk(1000, 0x5A);
    const int fd = ::open(dir.file(name).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, junk.data(), junk.size()), 1000);
    ::close(fd);
  }
  save_index(small_index(rng, 5), path);
  EXPECT_FALSE(fs::exists(dir.file(stale))) << "the dead saver's temporary file is still there";
  EXPECT_TRUE(fs::exists(dir.file(live))) << "a live process's temporary file was removed";
  EXPECT_TRUE(fs::exists(dir.file(other_target)));
  EXPECT_TRUE(fs::exists(dir.file(unrelated)));
}

TEST(IndexFileHostile, AFileSizeLimitIsAnIoErrorNotSigxfsz) {
  std::mt19937_64 rng(test_seed());
  Folder dir;
  const std::string path = dir.file("big.pfx");
  const BlockIndex bigger = small_index(rng, 5000);  // 200 KB
  // SIGXFSZ at its default (death), as in a shell with `ulimit -f`; before, the save killed
  // the process.
  const int rc = run_child([&] {
    ::signal(SIGXFSZ, SIG_DFL);
    struct rlimit small {};
    ::getrlimit(RLIMIT_FSIZE, &small);
    small.rlim_cur = 64 * 1024;
    if (::setrlimit(RLIMIT_FSIZE, &small) != 0) {
      return 50;
    }
    const int thrown = throws<IoError>([&] { save_index(bigger, path); }, "cannot write");
    // The SIGXFSZ the write raised was consumed, and the mask is as before.
    sigset_t pending{};
    ::sigpending(&pending);
    sigset_t mask{};
    ::pthread_sigmask(SIG_SETMASK, nullptr, &mask);
    if (sigismember(&pending, SIGXFSZ) == 1 || sigismember(&mask, SIGXFSZ) == 1) {
      return 60;
    }
    return thrown;
  });
  EXPECT_EQ(rc, 0) << (rc < 0 ? "killed by signal " + std::to_string(-rc) : "exit code");
  EXPECT_FALSE(fs::exists(path));
}

TEST(IndexFileHostile, NamesNear255BytesSaveAndLoad) {
  std::mt19937_64 rng(test_seed());
  Folder dir;
  for (const std::size_t length : {200U, 240U, 250U, 255U}) {
    const std::string name = std::string(length - 4, 'n') + ".pfx";
    const std::string path = dir.file(name);
    const BlockIndex index = small_index(rng, 20);
    ASSERT_NO_THROW(save_index(index, path)) << length << "-byte name";  // failed before
    BlockIndex loaded;
    load_index(path, loaded);
    EXPECT_EQ(loaded.size(), 20U);
    ASSERT_NO_THROW(save_index(index, path)) << length << "-byte name, replacing";
    fs::remove(path);
  }
  EXPECT_TRUE(dir.names().empty()) << dir.names().front();
}

}  // namespace
}  // namespace prefixhit
