/* A seeded random stream shared by the C ABI test programs: test_seed() is PREFIXHIT_TEST_SEED
 * when set (to replay a run), else a fresh seed from the clock; seed_rng() starts the stream and
 * next() draws from it (xorshift64*). Each program prints its seed. */
#ifndef PREFIXHIT_TESTS_C_RANDOM_H
#define PREFIXHIT_TESTS_C_RANDOM_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static uint64_t rng_state;

static uint64_t next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}

static void seed_rng(uint64_t seed) {
  rng_state = seed * 2 + 1; /* odd: never the all-zero state */
}

static uint64_t test_seed(void) {
  const char* env = getenv("PREFIXHIT_TEST_SEED");
  return env != NULL && *env != '\0' ? strtoull(env, NULL, 10)
                                     : (uint64_t)time(NULL) ^ (uint64_t)clock();
}

#endif
