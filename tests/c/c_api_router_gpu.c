/* prefixhit_score_workers_gpu through the C ABI. Where prefixhit_router_gpu_available() (a CUDA
 * build, or the emulator, with a device): on random residencies (70 workers, two tiers, a
 * full-attention and a sliding-window group) every output equals prefixhit_score_workers', and a
 * finder error has the CPU call's status and message. Without one: PREFIXHIT_STATUS_UNAVAILABLE
 * with a message. Either way a bad batch is PREFIXHIT_STATUS_INVALID_ARGUMENT. Seeded: prints the
 * seed, PREFIXHIT_TEST_SEED replays it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "prefixhit/prefixhit.h"
#include "random.h"

static int failures = 0;

enum { W = 70, R = 6, MAX_HASHES = 64, D = PREFIXHIT_DIGEST_SIZE, G = 2 };

static uint8_t digests[R * MAX_HASHES * D];
static int64_t offsets[R + 1];
static int64_t max_lengths[R];
static int64_t cpu_hits[R * W], gpu_hits[R * W];
static int64_t cpu_blocks[R * W * G], gpu_blocks[R * W * G];
static int64_t cpu_placeholders[R * W * G], gpu_placeholders[R * W * G];

int main(void) {
  prefixhit_group_spec groups[G];
  prefixhit_config config;
  prefixhit_residency_options options;
  prefixhit_coordinator* coord = NULL;
  prefixhit_coordinator* window_only = NULL;
  prefixhit_residency* residency = NULL;
  const uint64_t seed = test_seed();
  const int gpu = prefixhit_router_gpu_available();
  char cpu_error[512];
  int64_t bad_offsets[2] = {0, 5};
  uint32_t mask;
  int r, w, g, i, b, trial, hit_cells = 0;
  prefixhit_status cpu_status;

  printf("c_api_router_gpu seed %llu (replay with PREFIXHIT_TEST_SEED=%llu), GPU %s\n",
         (unsigned long long)seed, (unsigned long long)seed, gpu ? "available" : "unavailable");
  seed_rng(seed);
  memset(groups, 0, sizeof groups);
  groups[0].kind = PREFIXHIT_FULL_ATTENTION;
  groups[0].block_size = 16;
  groups[1].kind = PREFIXHIT_SLIDING_WINDOW;
  groups[1].block_size = 8;
  groups[1].sliding_window = 16;
  memset(&config, 0, sizeof config);
  config.hash_block_size = 4;
  config.scheduler_block_size = 16;
  config.retention_interval = PREFIXHIT_NO_RETENTION_INTERVAL;
  config.groups = groups;
  config.num_groups = G;
  OK(prefixhit_coordinator_create(&config, &coord));
  config.scheduler_block_size = 8;
  config.groups = groups + 1;
  config.num_groups = 1;
  OK(prefixhit_coordinator_create(&config, &window_only));
  memset(&options, 0, sizeof options);
  options.num_workers = W;
  options.num_tiers = 2;
  OK(prefixhit_residency_create(&options, &residency));

  for (trial = 0; trial < 8; ++trial) {
    /* Requests share a document's first hashes, so workers holding it to various depths differ
     * at a few blocks; each worker holds each group's hashes to a random depth, with holes. */
    offsets[0] = 0;
    for (r = 0; r < R; ++r) {
      const int64_t n = 1 + (int64_t)(next() % MAX_HASHES);
      offsets[r + 1] = offsets[r] + n;
      max_lengths[r] = (int64_t)(next() % (uint64_t)(n * 4 + 1));
      for (i = 0; i < n; ++i) {
        for (b = 0; b < D; ++b) {
          digests[(offsets[r] + i) * D + b] =
              (uint8_t)(r % 2 == 0 || i < n / 2 ? (uint64_t)(31 * i + 7 * b + trial) : next());
        }
      }
    }
    for (w = 0; w < W; ++w) {
      OK(prefixhit_residency_clear_worker(residency, (uint32_t)w));
      for (g = 0; g < G; ++g) {
        const int64_t depth = (int64_t)(next() % (uint64_t)(offsets[R] + 1));
        for (i = 0; i < depth; ++i) {
          if (next() % 10 != 0) {
            OK(prefixhit_residency_insert(residency, (uint32_t)w, 0, g, digests + i * D, 1, D,
                                          (int)(next() % 2), NULL));
          }
        }
      }
    }
    for (mask = 1; mask <= 3; mask += 2) { /* tier 0 only, then every tier */
      OK(prefixhit_score_workers(coord, residency, digests, (size_t)offsets[R], offsets,
                                 max_lengths, NULL, R, 0, mask, 1, cpu_hits, cpu_blocks,
                                 cpu_placeholders));
      if (!gpu) {
        FAILS(prefixhit_score_workers_gpu(coord, residency, digests, (size_t)offsets[R], offsets,
                                          max_lengths, NULL, R, 0, mask, gpu_hits, gpu_blocks,
                                          gpu_placeholders),
              PREFIXHIT_STATUS_UNAVAILABLE);
        continue;
      }
      memset(gpu_blocks, 0xFF, sizeof gpu_blocks);
      OK(prefixhit_score_workers_gpu(coord, residency, digests, (size_t)offsets[R], offsets,
                                     max_lengths, NULL, R, 0, mask, gpu_hits, gpu_blocks,
                                     gpu_placeholders));
      CHECK(memcmp(gpu_hits, cpu_hits, sizeof cpu_hits) == 0);
      CHECK(memcmp(gpu_blocks, cpu_blocks, sizeof cpu_blocks) == 0);
      CHECK(memcmp(gpu_placeholders, cpu_placeholders, sizeof cpu_placeholders) == 0);
      for (i = 0; i < R * W; ++i) {
        hit_cells += cpu_hits[i] > 0 ? 1 : 0;
      }
      /* The optional outputs may be left out. */
      memset(gpu_hits, 0xFF, sizeof gpu_hits);
      OK(prefixhit_score_workers_gpu(coord, residency, digests, (size_t)offsets[R], offsets,
                                     max_lengths, NULL, R, 0, mask, gpu_hits, NULL, NULL));
      CHECK(memcmp(gpu_hits, cpu_hits, sizeof cpu_hits) == 0);
    }
    /* A bound past a request's last whole block fails a window group's finder when it comes
     * first (the window-only coordinator; behind full attention the bound is capped): the GPU
     * call gives the CPU call's status and message. */
    r = (int)(next() % R);
    max_lengths[r] = (offsets[r + 1] - offsets[r]) * 4 + 8;
    cpu_status = prefixhit_score_workers(window_only, residency, digests, (size_t)offsets[R],
                                         offsets, max_lengths, NULL, R, 0, PREFIXHIT_ALL_TIERS, 1,
                                         cpu_hits, NULL, NULL);
    CHECK(cpu_status == PREFIXHIT_STATUS_INVALID_ARGUMENT);
    snprintf(cpu_error, sizeof cpu_error, "%s", prefixhit_last_error());
    CHECK(prefixhit_score_workers_gpu(window_only, residency, digests, (size_t)offsets[R], offsets,
                                      max_lengths, NULL, R, 0, PREFIXHIT_ALL_TIERS, gpu_hits, NULL,
                                      NULL) == (gpu ? cpu_status : PREFIXHIT_STATUS_UNAVAILABLE));
    CHECK(!gpu || strcmp(prefixhit_last_error(), cpu_error) == 0);
  }
  printf("c_api_router_gpu: %d (request, worker) cells with a hit compared\n", hit_cells);
  CHECK(!gpu || hit_cells > 0);

  /* Bad batches and handles, with or without a device. */
  FAILS(prefixhit_score_workers_gpu(coord, residency, digests, 4, bad_offsets, max_lengths, NULL, 1,
                                    0, PREFIXHIT_ALL_TIERS, gpu_hits, NULL, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_score_workers_gpu(coord, NULL, digests, 4, offsets, max_lengths, NULL, 1, 0,
                                    PREFIXHIT_ALL_TIERS, gpu_hits, NULL, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_score_workers_gpu(coord, residency, digests, 4, offsets, max_lengths, NULL, 1, 0,
                                    PREFIXHIT_ALL_TIERS, NULL, NULL, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);

  prefixhit_residency_destroy(residency);
  prefixhit_coordinator_destroy(coord);
  prefixhit_coordinator_destroy(window_only);
  if (failures != 0) {
    fprintf(stderr, "c_api_router_gpu: %d checks failed (seed %llu)\n", failures,
            (unsigned long long)seed);
    return 1;
  }
  printf("c_api_router_gpu: ok\n");
  return 0;
}
