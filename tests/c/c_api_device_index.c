/* The device block index and GPU lookups through the C ABI. Where prefixhit_gpu_available() (a
 * CUDA build, or the emulator, with a device): random keys of 8- and 32-byte digests go into a
 * CPU block index and a device index alike; every contains answer, every insert/erase count and
 * every output of random batches (prefixhit_find_longest_cache_hits on the CPU index against
 * prefixhit_find_longest_cache_hits_gpu on the device index) is equal, before and after erasing
 * some keys; a failing request has the CPU call's status and message. Without one, every call is
 * PREFIXHIT_STATUS_UNAVAILABLE with a message. Either way bad arguments are
 * PREFIXHIT_STATUS_INVALID_ARGUMENT naming the argument. Seeded: prints the seed,
 * PREFIXHIT_TEST_SEED replays it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "gpu_lookups.h"
#include "prefixhit/prefixhit.h"
#include "random.h"

static int failures = 0;

enum { R = 6, MAX_HASHES = 48, D = PREFIXHIT_DIGEST_SIZE, G = 2, NS = 2 };

static uint8_t digests[R * MAX_HASHES * D];
static uint8_t probe[2 * R * MAX_HASHES * D];
static uint8_t cpu_present[2 * R * MAX_HASHES], gpu_present[2 * R * MAX_HASHES];
static int64_t offsets[R + 1];
static int64_t max_lengths[R];
static uint8_t eagle[R];
static int64_t cpu_hits[R], gpu_hits[R];
static int64_t cpu_blocks[R * G], gpu_blocks[R * G];
static int64_t cpu_placeholders[R * G], gpu_placeholders[R * G];

/* Fills a random batch of `width`-byte digests: even requests share a document's first hashes
 * (so holes and depths decide the hits), odd ones share half of it. */
static void make_batch(size_t width, int trial) {
  int r, i;
  size_t b;
  offsets[0] = 0;
  for (r = 0; r < R; ++r) {
    const int64_t n = 1 + (int64_t)(next() % MAX_HASHES);
    offsets[r + 1] = offsets[r] + n;
    max_lengths[r] = (int64_t)(next() % (uint64_t)(n * 4 + 1));
    eagle[r] = (uint8_t)(next() % 2);
    for (i = 0; i < n; ++i) {
      for (b = 0; b < width; ++b) {
        digests[(size_t)(offsets[r] + i) * width + b] =
            (uint8_t)(r % 2 == 0 || i < n / 2 ? (uint64_t)(31 * i + 7 * (int)b + trial) : next());
      }
    }
  }
}

/* Every batch digest and as many random ones, in both indexes, for every (ns, group). */
static void compare_contains(const prefixhit_block_index* cpu,
                             const prefixhit_device_block_index* gpu, size_t width) {
  const size_t n = (size_t)offsets[R];
  size_t i;
  uint32_t ns;
  int g;
  memcpy(probe, digests, n * width);
  for (i = n * width; i < 2 * n * width; ++i) {
    probe[i] = (uint8_t)next();
  }
  for (ns = 0; ns < NS; ++ns) {
    for (g = 0; g < G; ++g) {
      memset(gpu_present, 0xFF, sizeof gpu_present);
      OK(prefixhit_block_index_contains_width(cpu, ns, g, width, probe, 2 * n, cpu_present));
      OK(prefixhit_device_block_index_contains_width(gpu, ns, g, width, probe, 2 * n, gpu_present));
      CHECK(memcmp(cpu_present, gpu_present, 2 * n) == 0);
    }
  }
}

/* Every request of the batch on both engines, per namespace and EAGLE choice. */
static int compare_lookups(const prefixhit_coordinator* coord, const prefixhit_gpu_engine* engine,
                           const prefixhit_block_index* cpu,
                           const prefixhit_device_block_index* gpu) {
  uint32_t ns;
  int flags, agree, hits = 0;
  size_t size_cpu = 0, size_gpu = 0;
  for (ns = 0; ns < NS; ++ns) {
    for (flags = 0; flags < 2; ++flags) {
      hits += lookups_on_both(coord, engine, cpu, gpu, ns, digests, offsets, max_lengths,
                              flags ? eagle : NULL, R, G, &agree);
      CHECK(agree);
    }
  }
  OK(prefixhit_block_index_size(cpu, &size_cpu));
  OK(prefixhit_device_block_index_size(gpu, &size_gpu));
  CHECK(size_cpu == size_gpu);
  return hits;
}

/* One coordinator of digest width `width`: trials of random keys, lookups, erasures. */
static int run_width(size_t width, const prefixhit_group_spec* groups) {
  prefixhit_config config;
  prefixhit_block_index_options options;
  prefixhit_coordinator* coord = NULL;
  prefixhit_gpu_engine* engine = NULL;
  prefixhit_block_index* cpu = NULL;
  prefixhit_device_block_index* gpu = NULL;
  prefixhit_gpu_engine* bad_engine = (prefixhit_gpu_engine*)&config; /* set to NULL by a failure */
  prefixhit_device_block_index* bad_gpu = (prefixhit_device_block_index*)&config;
  char cpu_error[512];
  prefixhit_status cpu_status;
  prefixhit_store store;
  int trial, r, g, i, hits = 0;
  uint32_t ns;
  size_t count_cpu, count_gpu;

  memset(&config, 0, sizeof config);
  config.hash_block_size = 4;
  config.scheduler_block_size = 16;
  config.retention_interval = PREFIXHIT_NO_RETENTION_INTERVAL;
  config.groups = groups;
  config.num_groups = G;
  config.digest_size = width;
  OK(prefixhit_coordinator_create(&config, &coord));
  OK(prefixhit_gpu_engine_create(coord, &engine));
  memset(&options, 0, sizeof options);
  options.initial_capacity = 64; /* small, so that inserts grow both tables */
  OK(prefixhit_block_index_create(&options, &cpu));
  OK(prefixhit_device_block_index_create(&options, &gpu));

  for (trial = 0; trial < 4; ++trial) {
    make_batch(width, trial);
    /* Each (ns, group) holds each request's hashes to a random depth, with holes. */
    for (ns = 0; ns < NS; ++ns) {
      for (r = 0; r < R; ++r) {
        for (g = 0; g < G; ++g) {
          const int64_t n = offsets[r + 1] - offsets[r];
          const int64_t depth = (int64_t)(next() % (uint64_t)(n + 1));
          for (i = 0; i < depth; ++i) {
            const uint8_t* key = digests + (size_t)(offsets[r] + i) * width;
            if (next() % 8 == 0) {
              continue;
            }
            OK(prefixhit_block_index_insert_width(cpu, ns, g, width, key, 1, &count_cpu));
            OK(prefixhit_device_block_index_insert_width(gpu, ns, g, width, key, 1, &count_gpu));
            CHECK(count_cpu == count_gpu);
          }
        }
      }
    }
    compare_contains(cpu, gpu, width);
    hits += compare_lookups(coord, engine, cpu, gpu);
    /* Erase a random run of the batch's digests from one (ns, group), in one call. */
    ns = (uint32_t)(next() % NS);
    g = (int)(next() % G);
    r = (int)(next() % (uint64_t)offsets[R]);
    i = (int)(next() % (uint64_t)(offsets[R] - r + 1));
    OK(prefixhit_block_index_erase_width(cpu, ns, g, width, digests + (size_t)r * width, (size_t)i,
                                         &count_cpu));
    OK(prefixhit_device_block_index_erase_width(gpu, ns, g, width, digests + (size_t)r * width,
                                                (size_t)i, &count_gpu));
    CHECK(count_cpu == count_gpu);
    compare_contains(cpu, gpu, width);
    hits += compare_lookups(coord, engine, cpu, gpu);
    /* A negative bound fails its request: the GPU call gives the CPU call's status and
     * message ("request <r>: ..."). */
    r = (int)(next() % R);
    max_lengths[r] = -1 - (int64_t)(next() % 100);
    memset(&store, 0, sizeof store);
    store.block_index = cpu;
    cpu_status = prefixhit_find_longest_cache_hits(coord, digests, (size_t)offsets[R], offsets,
                                                   max_lengths, NULL, R, &store, 1, cpu_hits,
                                                   cpu_blocks, cpu_placeholders);
    snprintf(cpu_error, sizeof cpu_error, "%s", prefixhit_last_error());
    CHECK(cpu_status == PREFIXHIT_STATUS_INVALID_ARGUMENT);
    CHECK(prefixhit_find_longest_cache_hits_gpu(engine, digests, (size_t)offsets[R], offsets,
                                                max_lengths, NULL, R, gpu, 0, gpu_hits, gpu_blocks,
                                                gpu_placeholders) == cpu_status);
    CHECK(strcmp(prefixhit_last_error(), cpu_error) == 0);
  }

  /* No keys is no work, and no buffer is needed for it. */
  count_gpu = 1;
  OK(prefixhit_device_block_index_insert_width(gpu, 0, 0, width, NULL, 0, &count_gpu));
  CHECK(count_gpu == 0);
  OK(prefixhit_device_block_index_erase_width(gpu, 0, 0, width, NULL, 0, NULL));
  OK(prefixhit_device_block_index_contains_width(gpu, 0, 0, width, NULL, 0, NULL));

  /* Bad arguments name themselves. */
  FAILS(prefixhit_device_block_index_insert_width(gpu, 0, 0, width, NULL, 1, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "keys") != NULL);
  FAILS(prefixhit_device_block_index_insert_width(gpu, 0, 0, 7, digests, 1, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "7") != NULL);
  FAILS(prefixhit_device_block_index_insert_width(gpu, 1u << 24, 0, width, digests, 1, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "namespace") != NULL);
  FAILS(prefixhit_device_block_index_erase_width(gpu, 0, PREFIXHIT_MAX_GROUPS, width, digests, 1,
                                                 NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "group") != NULL);
  FAILS(prefixhit_device_block_index_contains_width(gpu, 0, 0, width, digests, 1, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "present") != NULL);
  FAILS(prefixhit_device_block_index_insert_width(NULL, 0, 0, width, digests, 1, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "index") != NULL);
  FAILS(prefixhit_device_block_index_size(gpu, NULL), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_find_longest_cache_hits_gpu(engine, digests, (size_t)offsets[R], offsets,
                                              max_lengths, NULL, R, gpu, 1u << 24, gpu_hits,
                                              gpu_blocks, gpu_placeholders),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "ns") != NULL);
  FAILS(prefixhit_find_longest_cache_hits_gpu(NULL, digests, (size_t)offsets[R], offsets,
                                              max_lengths, NULL, R, gpu, 0, gpu_hits, gpu_blocks,
                                              gpu_placeholders),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "engine") != NULL);
  FAILS(prefixhit_find_longest_cache_hits_gpu(engine, digests, (size_t)offsets[R], offsets,
                                              max_lengths, NULL, R, NULL, 0, gpu_hits, gpu_blocks,
                                              gpu_placeholders),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "index") != NULL);
  FAILS(prefixhit_find_longest_cache_hits_gpu(engine, digests, (size_t)offsets[R], offsets,
                                              max_lengths, NULL, R, gpu, 0, gpu_hits, NULL,
                                              gpu_placeholders),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "num_blocks") != NULL);
  /* A request past the digests: the CPU call's message, word for word. */
  offsets[R] += 1;
  cpu_status = prefixhit_find_longest_cache_hits(coord, digests, (size_t)offsets[R] - 1, offsets,
                                                 max_lengths, NULL, R, &store, 1, cpu_hits,
                                                 cpu_blocks, cpu_placeholders);
  snprintf(cpu_error, sizeof cpu_error, "%s", prefixhit_last_error());
  CHECK(cpu_status == PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(prefixhit_find_longest_cache_hits_gpu(engine, digests, (size_t)offsets[R] - 1, offsets,
                                              max_lengths, NULL, R, gpu, 0, gpu_hits, gpu_blocks,
                                              gpu_placeholders) == cpu_status);
  CHECK(strcmp(prefixhit_last_error(), cpu_error) == 0);
  /* A failed create hands out NULL (into other variables: these handles are still live). */
  FAILS(prefixhit_gpu_engine_create(NULL, &bad_engine), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(bad_engine == NULL);
  options.max_load_factor = 2.0;
  FAILS(prefixhit_device_block_index_create(&options, &bad_gpu), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(bad_gpu == NULL && strstr(prefixhit_last_error(), "max_load_factor") != NULL);

  prefixhit_device_block_index_destroy(gpu);
  prefixhit_block_index_destroy(cpu);
  prefixhit_gpu_engine_destroy(engine);
  prefixhit_coordinator_destroy(coord);
  return hits;
}

/* Without a device: every call is UNAVAILABLE once its plain arguments are checked. */
static void run_without_device(const prefixhit_group_spec* groups) {
  prefixhit_config config;
  prefixhit_coordinator* coord = NULL;
  prefixhit_gpu_engine* engine = NULL;
  prefixhit_device_block_index* gpu = NULL;
  prefixhit_mirror* mirror = NULL;
  prefixhit_mirror_options mirror_options;
  const char* endpoints[] = {"tcp://127.0.0.1:1"};
  uint8_t present[1];
  size_t size;
  memset(&config, 0, sizeof config);
  config.hash_block_size = 4;
  config.scheduler_block_size = 16;
  config.retention_interval = PREFIXHIT_NO_RETENTION_INTERVAL;
  config.groups = groups;
  config.num_groups = G;
  OK(prefixhit_coordinator_create(&config, &coord));
  make_batch(D, 0);
  FAILS(prefixhit_device_block_index_create(NULL, &gpu), PREFIXHIT_STATUS_UNAVAILABLE);
  CHECK(gpu == NULL);
  FAILS(prefixhit_gpu_engine_create(coord, &engine), PREFIXHIT_STATUS_UNAVAILABLE);
  CHECK(engine == NULL);
  FAILS(prefixhit_device_block_index_insert_width(NULL, 0, 0, D, digests, 1, NULL),
        PREFIXHIT_STATUS_UNAVAILABLE);
  FAILS(prefixhit_device_block_index_erase_width(NULL, 0, 0, D, digests, 1, NULL),
        PREFIXHIT_STATUS_UNAVAILABLE);
  FAILS(prefixhit_device_block_index_contains_width(NULL, 0, 0, D, digests, 1, present),
        PREFIXHIT_STATUS_UNAVAILABLE);
  FAILS(prefixhit_device_block_index_size(NULL, &size), PREFIXHIT_STATUS_UNAVAILABLE);
  FAILS(prefixhit_find_longest_cache_hits_gpu(NULL, digests, (size_t)offsets[R], offsets,
                                              max_lengths, NULL, R, NULL, 0, gpu_hits, gpu_blocks,
                                              gpu_placeholders),
        PREFIXHIT_STATUS_UNAVAILABLE);
  memset(&mirror_options, 0, sizeof mirror_options);
  mirror_options.endpoints = endpoints;
  mirror_options.num_endpoints = 1;
  FAILS(prefixhit_mirror_create_device(&mirror_options, NULL, &mirror),
        PREFIXHIT_STATUS_UNAVAILABLE);
  CHECK(mirror == NULL);
  /* Plain argument checks come first on every build. */
  FAILS(prefixhit_find_longest_cache_hits_gpu(NULL, digests, (size_t)offsets[R], NULL, max_lengths,
                                              NULL, R, NULL, 0, gpu_hits, gpu_blocks,
                                              gpu_placeholders),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "offsets") != NULL);
  FAILS(prefixhit_device_block_index_create(NULL, NULL), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_mirror_create_device(NULL, NULL, &mirror), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  prefixhit_device_block_index_destroy(NULL);
  prefixhit_gpu_engine_destroy(NULL);
  prefixhit_coordinator_destroy(coord);
}

int main(void) {
  prefixhit_group_spec groups[G];
  const uint64_t seed = test_seed();
  const int gpu = prefixhit_gpu_available();
  int hits = 0;

  printf("c_api_device_index seed %llu (replay with PREFIXHIT_TEST_SEED=%llu), GPU %s\n",
         (unsigned long long)seed, (unsigned long long)seed, gpu ? "available" : "unavailable");
  seed_rng(seed);
  memset(groups, 0, sizeof groups);
  groups[0].kind = PREFIXHIT_FULL_ATTENTION;
  groups[0].block_size = 16;
  groups[1].kind = PREFIXHIT_SLIDING_WINDOW;
  groups[1].block_size = 8;
  groups[1].sliding_window = 16;
  CHECK(gpu == prefixhit_router_gpu_available());
  if (gpu) {
    hits += run_width(8, groups);
    hits += run_width(D, groups);
    printf("c_api_device_index: %d requests with a hit compared\n", hits);
    CHECK(hits > 0);
  } else {
    run_without_device(groups);
  }
  if (failures != 0) {
    fprintf(stderr, "c_api_device_index: %d checks failed (seed %llu)\n", failures,
            (unsigned long long)seed);
    return 1;
  }
  printf("c_api_device_index: ok\n");
  return 0;
}
