// libFuzzer target: the index file loader on arbitrary bytes.
//
// The first byte picks a mode: raw bytes, or the rest with both CRCs recomputed (so that the
// fuzzer reaches the record checks behind the checksums instead of stopping at them); bit 2
// writes the image to a file extended with a hole to its declared size (sparse files). Checked:
// * read_index_stats_from_memory and load_index_from_memory accept and reject the same inputs,
//   and only with FormatError or CapacityExceeded;
// * a rejected load leaves the target index exactly as it was;
// * an accepted image loads key_count keys, and serialising the loaded index reproduces the
//   image byte for byte (the format is canonical);
// * stats agree with the loaded index.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/index_file.hpp"

namespace {

using namespace prefixhit;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_index_file: %s\n", what.c_str());
  std::abort();
}

void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
}

/// Recomputes the header CRC and the trailer CRC of an image, wherever they would sit.
void fix_checksums(std::vector<std::uint8_t>& image) {
  if (image.size() >= kIndexFileHeaderBytes) {
    put_u32(image.data() + 36, crc32c(image.data(), 36));
  }
  if (image.size() >= kIndexFileHeaderBytes + kIndexFileTrailerBytes) {
    const std::size_t body = image.size() - kIndexFileTrailerBytes;
    put_u32(image.data() + body, crc32c(image.data(), body));
  }
}

std::vector<std::uint8_t> fingerprint(const BlockIndex& index) {
  return serialize_index(index);
}

/// Mode bit 2: the image becomes a file (an in-memory memfd), extended with a hole to the size
/// its header declares (up to 2^34 keys). A file with a hole must be refused at once with
/// FormatError ("sparse"); the fuzzer's -timeout catches a loader that reads the hole.
void check_sparse_file(const std::vector<std::uint8_t>& image) {
  const int fd = ::memfd_create("fuzz-index", MFD_CLOEXEC);
  if (fd < 0) {
    return;
  }
  std::uint64_t declared = 0;
  if (image.size() >= 32) {
    for (int i = 7; i >= 0; --i) {
      declared = (declared << 8) | image[24 + static_cast<std::size_t>(i)];
    }
  }
  const bool written = image.empty() || ::write(fd, image.data(), image.size()) ==
                                            static_cast<ssize_t>(image.size());
  std::uint64_t size = image.size();
  if (declared <= (std::uint64_t{1} << 34)) {
    size = std::max<std::uint64_t>(size, 44 + 40 * declared);
  }
  if (!written || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return;
  }
  const bool has_hole = size > image.size() + 4096;  // holes are whole pages
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      if (attempt == 0) {
        read_index_stats(path);
      } else {
        BlockIndex index;
        load_index(path, index);
      }
      if (has_hole) {
        fail("a file with a hole was accepted");
      }
    } catch (const FormatError& e) {
      if (has_hole && std::strstr(e.what(), "sparse") == nullptr) {
        fail(std::string("a file with a hole was not reported as sparse: ") + e.what());
      }
    } catch (const CapacityExceeded&) {
      if (has_hole) {
        fail("a file with a hole was reported as capacity_exceeded");
      }
    }
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  std::vector<std::uint8_t> image(data + 1, data + size);
  if ((data[0] & 1) != 0) {
    fix_checksums(image);
  }
  if ((data[0] & 4) != 0) {
    check_sparse_file(image);
    return 0;
  }
  // Small enough that a few hundred records can overflow it: exercises CapacityExceeded.
  BlockIndexOptions options;
  options.initial_capacity = 16;
  options.max_capacity = (data[0] & 2) != 0 ? 64 : 0;
  BlockIndex target(options);
  BlockDigest marker;
  marker.bytes.fill(0xA5);
  target.insert(7, 3, span<const BlockDigest>(&marker, 1));
  const std::vector<std::uint8_t> before = fingerprint(target);

  IndexFileStats stats;
  bool stats_ok = false;
  try {
    stats = read_index_stats_from_memory(image.data(), image.size(), "fuzz-input");
    stats_ok = true;
  } catch (const FormatError&) {
  }
  IndexFileStats loaded;
  bool load_ok = false;
  bool capacity = false;
  try {
    loaded = load_index_from_memory(image.data(), image.size(), target, "fuzz-input");
    load_ok = true;
  } catch (const FormatError& e) {
    if (std::strstr(e.what(), "fuzz-input") == nullptr) {
      fail(std::string("error message does not name the input: ") + e.what());
    }
  } catch (const CapacityExceeded&) {
    capacity = true;
  }
  if (!load_ok) {
    if (fingerprint(target) != before) {
      fail("a rejected load changed the target index");
    }
    if (stats_ok && !capacity) {
      fail("read_index_stats accepted an image that load_index rejected as malformed");
    }
    return 0;
  }
  if (!stats_ok) {
    fail("load_index accepted an image that read_index_stats rejected");
  }
  if (loaded.key_count != stats.key_count || target.size() != loaded.key_count ||
      loaded.keys_per_group != stats.keys_per_group ||
      loaded.keys_per_namespace != stats.keys_per_namespace) {
    fail("stats disagree with the loaded index");
  }
  if (serialize_index(target) != image) {
    fail("serialising the loaded index does not reproduce the accepted image");
  }
  return 0;
}
