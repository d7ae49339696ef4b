// The emulator's configuration (environment variables) and its fatal diagnostics.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "internal.hpp"

namespace cuemu::detail {
namespace {

double parse_double(const char* name, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= lo && v <= hi)) {
    fatal("%s=%s: expected a number in [%g, %g]", name, text, lo, hi);
  }
  return v;
}

long long parse_int(const char* name, const char* text, long long lo, long long hi) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) {
    fatal("%s=%s: expected an integer in [%lld, %lld]", name, text, lo, hi);
  }
  return v;
}

Config read_config() {
  Config c;
  if (const char* s = std::getenv("CUEMU_SCHEDULE")) {
    if (std::strcmp(s, "rr") == 0 || *s == '\0') {
      c.random = false;
    } else if (std::strncmp(s, "random", 6) == 0 && (s[6] == '\0' || s[6] == ':')) {
      c.random = true;
      c.preempt = 0.25;
      c.seed = s[6] == ':' ? static_cast<std::uint64_t>(
                                 parse_int("CUEMU_SCHEDULE random seed", s + 7, 0, 1LL << 62))
                           : 1;
    } else {
      fatal("CUEMU_SCHEDULE=%s: expected rr or random:SEED", s);
    }
  }
  if (const char* s = std::getenv("CUEMU_PREEMPT")) {
    c.preempt = parse_double("CUEMU_PREEMPT", s, 0.0, 1.0);
  }
  if (const char* s = std::getenv("CUEMU_RESIDENT_BLOCKS")) {
    c.resident_blocks = static_cast<int>(parse_int("CUEMU_RESIDENT_BLOCKS", s, 1, 1024));
  }
  if (const char* s = std::getenv("CUEMU_SM_COUNT")) {
    c.sm_count = static_cast<int>(parse_int("CUEMU_SM_COUNT", s, 1, 1024));
  }
  if (const char* s = std::getenv("CUEMU_STACK_KB")) {
    c.stack_bytes = static_cast<std::size_t>(parse_int("CUEMU_STACK_KB", s, 16, 65536)) * 1024;
  }
  if (const char* s = std::getenv("CUEMU_MEM_GB")) {
    c.mem_bytes = static_cast<std::size_t>(parse_int("CUEMU_MEM_GB", s, 1, 1 << 20)) << 30;
  }
  if (const char* s = std::getenv("CUEMU_NO_DEVICE")) {
    c.no_device = parse_int("CUEMU_NO_DEVICE", s, 0, 1) != 0;
  }
  if (const char* s = std::getenv("CUEMU_VERBOSE")) {
    c.verbose = parse_int("CUEMU_VERBOSE", s, 0, 1) != 0;
  }
  return c;
}

thread_local cudaError_t tl_last_error = cudaSuccess;

}  // namespace

const Config& config() {
  static const Config c = read_config();
  return c;
}

void fatal(const char* fmt, ...) {
  std::fprintf(stderr, "cuemu: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::abort();
}

void set_error(cudaError_t error) {
  if (error != cudaSuccess) {
    tl_last_error = error;
  }
}

cudaError_t last_error(bool reset) {
  const cudaError_t e = tl_last_error;
  if (reset) {
    tl_last_error = cudaSuccess;
  }
  return e;
}

}  // namespace cuemu::detail
