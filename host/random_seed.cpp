// The one source of hash-secret seeds (random_seed.hpp).
#include "host/random_seed.hpp"

#include <chrono>
#include <exception>
#include <random>

#include "prefixhit/errors.hpp"

#if PREFIXHIT_SLOT_HASH_ARM_AES
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace prefixhit::detail {

std::uint64_t random_hash_seed() noexcept {
  std::uint64_t seed = 0;
  try {
    std::random_device device;
    seed = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  } catch (const std::exception&) {
    seed = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return seed == 0 ? 0x6A09E667F3BCC909ULL : seed;  // zero means "draw one" to the callers
}

IndexHashKey checked_hash_key(std::uint64_t seed) {
#if PREFIXHIT_SLOT_HASH_AESNI
  __builtin_cpu_init();  // an index may be built from a static initializer, before libgcc's
  const bool has_aes = __builtin_cpu_supports("aes");
#elif PREFIXHIT_SLOT_HASH_ARM_AES
  const bool has_aes = (getauxval(AT_HWCAP) & HWCAP_AES) != 0;
#else
  const bool has_aes = true;  // the table form runs on any CPU
#endif
  if (!has_aes) {
    throw Unavailable(
        "prefixhit was built to hash index keys with the CPU's AES instructions "
        "(PREFIXHIT_CPU_AES=ON), and this CPU lacks them: rebuild with -DPREFIXHIT_CPU_AES=OFF");
  }
  return make_hash_key(seed);
}

}  // namespace prefixhit::detail
