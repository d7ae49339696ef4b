/* Digest widths through the C ABI: a coordinator of digest_size 8 and 16 takes hashes as
 * num_hashes * digest_size bytes, finds keys inserted at its width (key set and block index),
 * never finds the same bytes inserted at another width, and refuses stores and configurations
 * of the wrong width. Exits non-zero on the first unexpected result. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prefixhit/prefixhit.h"

static int failures = 0;

enum { H = 16, NUM_HASHES = 6 };

static void run_width(size_t width) {
  prefixhit_group_spec group;
  prefixhit_config config;
  prefixhit_coordinator* coord = NULL;
  prefixhit_key_set* set = NULL;
  prefixhit_key_set* wrong_set = NULL;
  prefixhit_block_index* index = NULL;
  prefixhit_lookup_result* result = NULL;
  prefixhit_store store;
  uint8_t hashes[NUM_HASHES * 32];
  uint8_t present[NUM_HASHES];
  int64_t hit = 0, hits[2] = {0, 0}, blocks[2] = {0, 0}, placeholders[2] = {0, 0};
  int64_t offsets[3] = {0, NUM_HASHES, 2 * NUM_HASHES};
  int64_t max_lengths[2] = {NUM_HASHES * H, NUM_HASHES * H};
  uint8_t batch[2 * NUM_HASHES * 32];
  size_t size = 0, added = 0, i = 0;

  memset(&group, 0, sizeof group);
  group.kind = PREFIXHIT_FULL_ATTENTION;
  group.block_size = H;
  memset(&config, 0, sizeof config);
  config.hash_block_size = H;
  config.scheduler_block_size = H;
  config.retention_interval = PREFIXHIT_NO_RETENTION_INTERVAL;
  config.groups = &group;
  config.num_groups = 1;
  config.digest_size = width;
  OK(prefixhit_coordinator_create(&config, &coord));
  OK(prefixhit_coordinator_digest_size(coord, &size));
  CHECK(size == width);

  /* Packed width-byte hashes; every byte nonzero so no two widths share a digest. */
  for (i = 0; i < NUM_HASHES * width; ++i) {
    hashes[i] = (uint8_t)(i * 7 + 3);
  }

  /* Key set and block index at this width: the first 4 hashes. */
  OK(prefixhit_key_set_create_width(width, &set));
  OK(prefixhit_key_set_insert(set, 0, hashes, 4, &added));
  CHECK(added == 4);
  OK(prefixhit_block_index_create(NULL, &index));
  OK(prefixhit_block_index_insert_width(index, 2, 0, width, hashes, 4, &added));
  CHECK(added == 4);
  /* The same bytes (zero-padded) as 32-byte keys: a different key, in every position. */
  if (width < 32) {
    uint8_t wide[NUM_HASHES * 32];
    memset(wide, 0, sizeof wide);
    for (i = 0; i < NUM_HASHES; ++i) {
      memcpy(wide + i * 32, hashes + i * width, width);
    }
    OK(prefixhit_block_index_insert_width(index, 2, 0, 32, wide, NUM_HASHES, &added));
    CHECK(added == NUM_HASHES);
  }
  OK(prefixhit_block_index_contains_width(index, 2, 0, width, hashes, NUM_HASHES, present));
  CHECK(present[3] == 1 && present[4] == 0);

  memset(&store, 0, sizeof store);
  store.key_set = set;
  OK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, NUM_HASHES * H, &store, 1,
                                      &result));
  OK(prefixhit_lookup_result_hit_length(result, &hit));
  CHECK(hit == 4 * H);
  prefixhit_lookup_result_destroy(result);
  result = NULL;

  store.key_set = NULL;
  store.block_index = index;
  store.ns = 2;
  OK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, NUM_HASHES * H, &store, 1,
                                      &result));
  OK(prefixhit_lookup_result_hit_length(result, &hit));
  CHECK(hit == 4 * H);
  prefixhit_lookup_result_destroy(result);
  result = NULL;

  /* A batch of the request twice, digests packed at the coordinator's width. */
  memcpy(batch, hashes, NUM_HASHES * width);
  memcpy(batch + NUM_HASHES * width, hashes, NUM_HASHES * width);
  OK(prefixhit_find_longest_cache_hits(coord, batch, 2 * NUM_HASHES, offsets, max_lengths, NULL, 2,
                                       &store, 1, hits, blocks, placeholders));
  CHECK(hits[0] == 4 * H && hits[1] == 4 * H);

  /* A key set of another width is refused. */
  OK(prefixhit_key_set_create_width(width == 32 ? 8 : 32, &wrong_set));
  store.block_index = NULL;
  store.key_set = wrong_set;
  CHECK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, NUM_HASHES * H, &store, 1,
                                         &result) == PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(prefixhit_last_error(), "digest_size") != NULL);
  CHECK(result == NULL);

  prefixhit_key_set_destroy(wrong_set);
  prefixhit_key_set_destroy(set);
  prefixhit_block_index_destroy(index);
  prefixhit_coordinator_destroy(coord);
}

int main(void) {
  prefixhit_key_set* set = NULL;
  prefixhit_block_index* index = NULL;
  uint8_t key[32];
  prefixhit_group_spec group;
  prefixhit_config config;
  prefixhit_coordinator* coord = NULL;

  run_width(8);
  run_width(16);
  run_width(32);

  /* Unsupported widths. */
  memset(key, 1, sizeof key);
  CHECK(prefixhit_key_set_create_width(12, &set) == PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(set == NULL);
  OK(prefixhit_block_index_create(NULL, &index));
  CHECK(prefixhit_block_index_insert_width(index, 0, 0, 24, key, 1, NULL) ==
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  prefixhit_block_index_destroy(index);
  memset(&group, 0, sizeof group);
  group.kind = PREFIXHIT_FULL_ATTENTION;
  group.block_size = H;
  memset(&config, 0, sizeof config);
  config.hash_block_size = H;
  config.scheduler_block_size = H;
  config.retention_interval = PREFIXHIT_NO_RETENTION_INTERVAL;
  config.groups = &group;
  config.num_groups = 1;
  config.digest_size = 20;
  CHECK(prefixhit_coordinator_create(&config, &coord) == PREFIXHIT_STATUS_INVALID_CONFIG);
  CHECK(strstr(prefixhit_last_error(), "digest_size") != NULL);

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("digest widths through the C ABI: ok\n");
  return 0;
}
