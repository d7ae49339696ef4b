/* Router mode through the C ABI, on a case small enough to check by hand: one full-attention
 * group of 16-token blocks, three workers with two tiers, one request of four block hashes
 * h0..h3 and max_length 64 (four blocks).
 *   worker 0 holds h0 h1 h2 on tier 0           -> hit 48
 *   worker 1 holds h0 h2 h3 on tier 0, h1 on 1  -> hit 16 on tier 0 only, 64 on every tier
 *   worker 2 holds nothing                      -> hit 0
 * Then top-k with and without loads, clear_worker, and the error paths. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prefixhit/prefixhit.h"

static int failures = 0;

enum { W = 3, N = 4, D = PREFIXHIT_DIGEST_SIZE };

static uint8_t hashes[N * D];

static const uint8_t* h(int i) {
  return hashes + i * D;
}

int main(void) {
  prefixhit_group_spec group;
  prefixhit_config config;
  prefixhit_residency_options options;
  prefixhit_coordinator* coord = NULL;
  prefixhit_residency* residency = NULL;
  const int64_t offsets[2] = {0, N};
  const int64_t max_lengths[1] = {64};
  int64_t hits[W], blocks[W], placeholders[W];
  int32_t top[4];
  size_t added = 0, size = 0;
  int held = -1, i, b;

  for (i = 0; i < N; ++i) {
    for (b = 0; b < D; ++b) {
      hashes[i * D + b] = (uint8_t)(17 * i + b + 1);
    }
  }
  memset(&group, 0, sizeof group);
  group.kind = PREFIXHIT_FULL_ATTENTION;
  group.block_size = 16;
  memset(&config, 0, sizeof config);
  config.hash_block_size = 16;
  config.scheduler_block_size = 16;
  config.retention_interval = PREFIXHIT_NO_RETENTION_INTERVAL;
  config.groups = &group;
  config.num_groups = 1;
  OK(prefixhit_coordinator_create(&config, &coord));

  memset(&options, 0, sizeof options);
  options.num_workers = W;
  options.num_tiers = 2;
  OK(prefixhit_residency_create(&options, &residency));
  OK(prefixhit_residency_insert(residency, 0, 0, 0, h(0), 3, D, 0, &added));
  CHECK(added == 3);
  OK(prefixhit_residency_insert(residency, 1, 0, 0, h(0), 1, D, 0, &added));
  OK(prefixhit_residency_insert(residency, 1, 0, 0, h(2), 2, D, 0, &added));
  CHECK(added == 2);
  OK(prefixhit_residency_insert(residency, 1, 0, 0, h(1), 1, D, 1, NULL));
  OK(prefixhit_residency_insert(residency, 1, 0, 0, h(1), 1, D, 1, &added));
  CHECK(added == 0); /* already held */
  OK(prefixhit_residency_size(residency, &size));
  CHECK(size == 4);
  OK(prefixhit_residency_contains(residency, 1, 0, 0, h(1), D, 1u, &held));
  CHECK(held == 0); /* tier 0 only */
  OK(prefixhit_residency_contains(residency, 1, 0, 0, h(1), D, PREFIXHIT_ALL_TIERS, &held));
  CHECK(held == 1);
  OK(prefixhit_residency_contains(residency, 2, 0, 0, h(0), D, PREFIXHIT_ALL_TIERS, &held));
  CHECK(held == 0);

  /* Every tier counts. */
  OK(prefixhit_score_workers(coord, residency, hashes, N, offsets, max_lengths, NULL, 1, 0,
                             PREFIXHIT_ALL_TIERS, 1, hits, blocks, placeholders));
  CHECK(hits[0] == 48 && hits[1] == 64 && hits[2] == 0);
  CHECK(blocks[0] == 3 && blocks[1] == 4 && blocks[2] == 0);
  CHECK(placeholders[0] == 0 && placeholders[1] == 0 && placeholders[2] == 0);
  OK(prefixhit_top_k_workers(hits, 1, W, 2, NULL, top));
  CHECK(top[0] == 1 && top[1] == 0);

  /* Digests at any alignment (borrowed when aligned, copied otherwise) answer the same. */
  {
    static uint8_t shifted[N * D + 1];
    int64_t again[W];
    memcpy(shifted + 1, hashes, sizeof hashes);
    OK(prefixhit_score_workers(coord, residency, shifted + 1, N, offsets, max_lengths, NULL, 1, 0,
                               PREFIXHIT_ALL_TIERS, 1, again, NULL, NULL));
    CHECK(again[0] == 48 && again[1] == 64 && again[2] == 0);
  }

  /* Tier 0 only: worker 1's hole at h1 cuts its prefix to one block. */
  OK(prefixhit_score_workers(coord, residency, hashes, N, offsets, max_lengths, NULL, 1, 0, 1u, 0,
                             hits, NULL, NULL));
  CHECK(hits[0] == 48 && hits[1] == 16 && hits[2] == 0);
  OK(prefixhit_top_k_workers(hits, 1, W, 2, NULL, top));
  CHECK(top[0] == 0 && top[1] == 1);

  /* Another namespace holds nothing. */
  OK(prefixhit_score_workers(coord, residency, hashes, N, offsets, max_lengths, NULL, 1, 9,
                             PREFIXHIT_ALL_TIERS, 1, hits, NULL, NULL));
  CHECK(hits[0] == 0 && hits[1] == 0 && hits[2] == 0);

  /* Ties: lower load first, then lower id; -1 past the last worker. */
  {
    const int64_t zero[W] = {0, 0, 0};
    const double load[W] = {3.0, 1.0, 1.0};
    OK(prefixhit_top_k_workers(zero, 1, W, 4, load, top));
    CHECK(top[0] == 1 && top[1] == 2 && top[2] == 0 && top[3] == -1);
  }

  /* The worker leaves: its keys go, the others' stay. */
  OK(prefixhit_residency_clear_worker(residency, 1));
  OK(prefixhit_score_workers(coord, residency, hashes, N, offsets, max_lengths, NULL, 1, 0,
                             PREFIXHIT_ALL_TIERS, 1, hits, NULL, NULL));
  CHECK(hits[0] == 48 && hits[1] == 0 && hits[2] == 0);
  OK(prefixhit_residency_erase(residency, 0, 0, 0, h(1), 1, D, 0, &added));
  CHECK(added == 1);
  OK(prefixhit_score_workers(coord, residency, hashes, N, offsets, max_lengths, NULL, 1, 0,
                             PREFIXHIT_ALL_TIERS, 1, hits, NULL, NULL));
  CHECK(hits[0] == 16);

  /* Errors: statuses and messages, nothing applied. */
  FAILS(prefixhit_residency_insert(residency, W, 0, 0, h(0), 1, D, 0, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_residency_insert(residency, 0, 0, 0, h(0), 1, D, 2, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_residency_insert(residency, 0, 0, 0, h(0), 1, 7, 0, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_residency_insert(residency, 0, 0, 0, NULL, 1, D, 0, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_residency_insert(NULL, 0, 0, 0, h(0), 1, D, 0, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_residency_clear_worker(residency, 99), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_score_workers(NULL, residency, hashes, N, offsets, max_lengths, NULL, 1, 0,
                                PREFIXHIT_ALL_TIERS, 1, hits, NULL, NULL),
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  {
    const int64_t bad_offsets[2] = {0, N + 1}; /* past the digests */
    FAILS(prefixhit_score_workers(coord, residency, hashes, N, bad_offsets, max_lengths, NULL, 1, 0,
                                  PREFIXHIT_ALL_TIERS, 1, hits, NULL, NULL),
          PREFIXHIT_STATUS_INVALID_ARGUMENT);
  }
  FAILS(prefixhit_top_k_workers(hits, 1, W, 0, NULL, top), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  prefixhit_residency_destroy(residency);
  residency = NULL;
  options.num_workers = 0;
  FAILS(prefixhit_residency_create(&options, &residency), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(residency == NULL);

  prefixhit_coordinator_destroy(coord);
  prefixhit_residency_destroy(NULL);
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("c_api_router: all checks passed\n");
  return 0;
}
