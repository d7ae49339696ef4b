/* A C program using prefixhit through its C ABI: builds the three-group configuration of
 * SEMANTICS.md 2.3 (FA(64), SWA(16, w=32), SWA(16, w=32, eagle)), saves a prompt through the
 * store mask into a key set and a block index, looks it up, reads the masks, runs a batch and
 * walks the error paths. Exits non-zero on the first unexpected result. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prefixhit/prefixhit.h"

static int failures = 0;

enum { H = 16, S = 64, NUM_HASHES = 12, NUM_GROUPS = 3 };

/* Deterministic stand-ins for SHA-256 block digests: distinct per (request, index). */
static void make_hashes(uint8_t* out, int request, int count) {
  int i, b;
  for (i = 0; i < count; ++i) {
    for (b = 0; b < PREFIXHIT_DIGEST_SIZE; ++b) {
      out[i * PREFIXHIT_DIGEST_SIZE + b] = (uint8_t)(31 * request + 7 * i + 13 * b + 1);
    }
    out[i * PREFIXHIT_DIGEST_SIZE] = (uint8_t)request;
    out[i * PREFIXHIT_DIGEST_SIZE + 1] = (uint8_t)i;
  }
}

/* Saves tokens [0, aligned_len) the way a connector does: for each group, the keys of the
 * chunks the store mask keeps. A chunk of a B-token group is keyed by its last hash. */
static void save(const prefixhit_coordinator* coord, const uint8_t* hashes, int64_t aligned_len,
                 const int64_t* block_sizes, prefixhit_key_set* set, prefixhit_block_index* index) {
  prefixhit_chunk_masks* masks = NULL;
  int32_t g;
  OK(prefixhit_store_mask(coord, aligned_len, 0, PREFIXHIT_NO_PROMPT_LENGTH, &masks));
  for (g = 0; g < NUM_GROUPS; ++g) {
    int64_t first = 0, end = 0, chunk;
    int is_all = 0;
    const uint8_t* keep = NULL;
    const int64_t per = block_sizes[g] / H;
    OK(prefixhit_chunk_masks_get(masks, g, &first, &end, &is_all, &keep));
    for (chunk = first; chunk < end; ++chunk) {
      if (is_all || keep[chunk - first]) {
        const uint8_t* key = hashes + ((chunk + 1) * per - 1) * PREFIXHIT_DIGEST_SIZE;
        OK(prefixhit_key_set_insert(set, g, key, 1, NULL));
        OK(prefixhit_block_index_insert(index, 7, g, key, 1, NULL));
      }
    }
  }
  prefixhit_chunk_masks_destroy(masks);
}

int main(void) {
  prefixhit_group_spec groups[NUM_GROUPS];
  prefixhit_config config;
  prefixhit_coordinator* coord = NULL;
  prefixhit_key_set* set = NULL;
  prefixhit_block_index* index = NULL;
  prefixhit_lookup_result* result = NULL;
  prefixhit_chunk_masks* masks = NULL;
  prefixhit_store store;
  const int64_t block_sizes[NUM_GROUPS] = {64, 16, 16};
  uint8_t hashes[NUM_HASHES * PREFIXHIT_DIGEST_SIZE];
  uint8_t mask[16];
  int32_t ids[4];
  size_t count = 0, len = 0;
  int64_t value = 0, blocks = 0, placeholders = 0;
  int use_eagle = 0, is_all = 0;
  int32_t num_groups = 0;

  /* ---- configuration ---- */
  memset(groups, 0, sizeof groups);
  groups[0].kind = PREFIXHIT_FULL_ATTENTION;
  groups[0].block_size = 64;
  groups[0].dtype = "bfloat16";
  groups[1].kind = PREFIXHIT_SLIDING_WINDOW;
  groups[1].block_size = 16;
  groups[1].sliding_window = 32;
  groups[1].dtype = "bfloat16";
  groups[2] = groups[1];
  groups[2].eagle = 1;
  memset(&config, 0, sizeof config);
  config.hash_block_size = H;
  config.scheduler_block_size = S;
  config.use_eagle = 1;
  config.retention_interval = PREFIXHIT_NO_RETENTION_INTERVAL;
  config.groups = groups;
  config.num_groups = NUM_GROUPS;
  OK(prefixhit_coordinator_create(&config, &coord));
  CHECK(strcmp(prefixhit_last_error(), "") == 0);

  OK(prefixhit_coordinator_num_groups(coord, &num_groups));
  CHECK(num_groups == NUM_GROUPS);
  OK(prefixhit_coordinator_lookup_alignment(coord, &value));
  CHECK(value == S);
  /* The merged window spec group [1, 2] is EAGLE-flagged as a whole (the PR #49069 fix). */
  OK(prefixhit_coordinator_eagle_group_ids(coord, ids, 4, &count));
  CHECK(count == 2 && ids[0] == 1 && ids[1] == 2);
  OK(prefixhit_coordinator_num_spec_groups(coord, &count));
  CHECK(count == 2);
  OK(prefixhit_coordinator_spec_group(coord, 1, ids, 4, &count, &use_eagle));
  CHECK(count == 2 && ids[0] == 1 && ids[1] == 2 && use_eagle == 1);
  OK(prefixhit_coordinator_align_lookup_length(coord, 150, &value));
  CHECK(value == 128);

  /* ---- masks: FA(64) + SWA(16, w=32) with EAGLE over 128 tokens (SEMANTICS.md 7.3) ---- */
  OK(prefixhit_lookup_mask(coord, 128, &masks));
  OK(prefixhit_chunk_masks_get(masks, 0, NULL, NULL, &is_all, NULL));
  CHECK(is_all == 1);
  {
    int64_t first = -1, end = -1;
    const uint8_t* keep = NULL;
    const uint8_t want[8] = {0, 0, 1, 1, 1, 0, 1, 1};
    OK(prefixhit_chunk_masks_get(masks, 2, &first, &end, &is_all, &keep));
    CHECK(is_all == 0 && first == 0 && end == 8 && keep != NULL);
    CHECK(keep != NULL && memcmp(keep, want, 8) == 0);
  }
  prefixhit_chunk_masks_destroy(masks);

  /* ---- store 192 tokens, then look up. With EAGLE the window groups need the "peek" chunk
   * right after the hit (SEMANTICS.md 4.2), so a lookup bounded at 150 tokens finds 128 while
   * one bounded at exactly 128 finds only 64: the peek past 128 lies beyond max_length. ---- */
  make_hashes(hashes, 0, NUM_HASHES);
  OK(prefixhit_key_set_create(&set));
  OK(prefixhit_block_index_create(NULL, &index));
  save(coord, hashes, 192, block_sizes, set, index);
  OK(prefixhit_key_set_size(set, &count));
  CHECK(count == 3 + 8 + 8); /* FA: every chunk; windows: chunks 2,3,4,6,7,8,10,11 */

  memset(&store, 0, sizeof store);
  store.key_set = set;
  OK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, 128, &store, 1, &result));
  OK(prefixhit_lookup_result_hit_length(result, &value));
  CHECK(value == 64);
  prefixhit_lookup_result_destroy(result);
  OK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, 150, &store, 1, &result));
  OK(prefixhit_lookup_result_hit_length(result, &value));
  CHECK(value == 128);
  OK(prefixhit_lookup_result_num_groups(result, &num_groups));
  CHECK(num_groups == NUM_GROUPS);
  OK(prefixhit_lookup_result_mask(result, 0, mask, sizeof mask, &len));
  CHECK(len == 2 && mask[0] == 1 && mask[1] == 1);
  OK(prefixhit_lookup_result_group(result, 1, &blocks, &placeholders));
  CHECK(blocks == 8 && placeholders == 6);
  OK(prefixhit_lookup_result_mask(result, 2, mask, sizeof mask, &len));
  CHECK(len == 8 && mask[5] == 0 && mask[6] == 1 && mask[7] == 1);
  prefixhit_lookup_result_destroy(result);

  /* The same through the block index, in its namespace 7, and nothing in namespace 8. */
  memset(&store, 0, sizeof store);
  store.block_index = index;
  store.ns = 7;
  OK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, 150, &store, 1, &result));
  OK(prefixhit_lookup_result_hit_length(result, &value));
  CHECK(value == 128);
  prefixhit_lookup_result_destroy(result);
  store.ns = 8;
  OK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, 150, &store, 1, &result));
  OK(prefixhit_lookup_result_hit_length(result, &value));
  CHECK(value == 0);
  prefixhit_lookup_result_destroy(result);

  /* load_mask: what to read of a decided 128-token hit (no EAGLE drop). */
  OK(prefixhit_load_mask(coord, NUM_HASHES, 128, &result));
  OK(prefixhit_lookup_result_group(result, 2, &blocks, &placeholders));
  CHECK(blocks == 8 && placeholders == 6);
  prefixhit_lookup_result_destroy(result);

  /* ---- a batch of three requests equals the one-by-one calls ---- */
  {
    uint8_t digests[3 * NUM_HASHES * PREFIXHIT_DIGEST_SIZE];
    const int64_t offsets[4] = {0, NUM_HASHES, NUM_HASHES, 2 * NUM_HASHES + 4};
    const int64_t max_lengths[3] = {150, 0, 191};
    int64_t hits[3], nb[3 * NUM_GROUPS], np[3 * NUM_GROUPS];
    size_t r;
    make_hashes(digests, 0, NUM_HASHES);
    make_hashes(digests + NUM_HASHES * PREFIXHIT_DIGEST_SIZE, 0, NUM_HASHES + 4);
    store.ns = 7;
    OK(prefixhit_find_longest_cache_hits(coord, digests, 2 * NUM_HASHES + 4, offsets, max_lengths,
                                         NULL, 3, &store, 1, hits, nb, np));
    CHECK(hits[0] == 128 && hits[1] == 0 && hits[2] == 128);
    for (r = 0; r < 3; ++r) {
      int32_t g;
      OK(prefixhit_find_longest_cache_hit(coord, digests + offsets[r] * PREFIXHIT_DIGEST_SIZE,
                                          (size_t)(offsets[r + 1] - offsets[r]), max_lengths[r],
                                          &store, 1, &result));
      OK(prefixhit_lookup_result_hit_length(result, &value));
      CHECK(value == hits[r]);
      for (g = 0; g < NUM_GROUPS; ++g) {
        OK(prefixhit_lookup_result_group(result, g, &blocks, &placeholders));
        CHECK(blocks == nb[r * NUM_GROUPS + g] && placeholders == np[r * NUM_GROUPS + g]);
      }
      prefixhit_lookup_result_destroy(result);
    }
  }

  /* ---- error paths: a status, a message, no crash, outputs reset ---- */
  /* A failing create/lookup sets *out to NULL, so point it somewhere first to see that. */
  result = (prefixhit_lookup_result*)&value;
  CHECK(prefixhit_store_mask(coord, 100, 0, PREFIXHIT_NO_PROMPT_LENGTH, &masks) ==
        PREFIXHIT_STATUS_UNALIGNED_LENGTH);
  CHECK(strstr(prefixhit_last_error(), "100") != NULL);
  CHECK(strcmp(prefixhit_status_name(PREFIXHIT_STATUS_UNALIGNED_LENGTH), "unaligned_length") == 0);
  store.key_set = set;
  store.block_index = NULL;
  CHECK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, -1, &store, 1, &result) ==
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(result == NULL);
  CHECK(strstr(prefixhit_last_error(), "max_length") != NULL);
  CHECK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, 64, NULL, 1, &result) ==
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  store.block_index = index; /* both set: ambiguous */
  CHECK(prefixhit_find_longest_cache_hit(coord, hashes, NUM_HASHES, 64, &store, 1, &result) ==
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(prefixhit_block_index_insert(index, 1u << 24, 0, hashes, 1, NULL) ==
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  {
    /* Invalid configuration: S = 48 is not a multiple of the 64-token block (SEMANTICS 1.1). */
    prefixhit_coordinator* bad = (prefixhit_coordinator*)&value;
    config.scheduler_block_size = 48;
    CHECK(prefixhit_coordinator_create(&config, &bad) == PREFIXHIT_STATUS_INVALID_CONFIG);
    CHECK(bad == NULL);
    CHECK(strlen(prefixhit_last_error()) > 0);
    printf("expected error: %s\n", prefixhit_last_error());
    config.scheduler_block_size = S;
  }
  {
    /* A chunked-local group flagged EAGLE cannot be looked up with the drop. */
    prefixhit_group_spec cl[1];
    prefixhit_config clc = config;
    prefixhit_coordinator* cl_coord = NULL;
    memset(cl, 0, sizeof cl);
    cl[0].kind = PREFIXHIT_CHUNKED_LOCAL;
    cl[0].block_size = 64;
    cl[0].attention_chunk_size = 128;
    cl[0].eagle = 1;
    clc.groups = cl;
    clc.num_groups = 1;
    OK(prefixhit_coordinator_create(&clc, &cl_coord));
    store.block_index = NULL;
    CHECK(prefixhit_find_longest_cache_hit(cl_coord, hashes, NUM_HASHES, 64, &store, 1, &result) ==
          PREFIXHIT_STATUS_UNSUPPORTED_EAGLE_CHUNKED_LOCAL);
    prefixhit_coordinator_destroy(cl_coord);
  }
  {
    /* Spec identity (issue 10): group 2 differs from group 1 in a field the finders do not use,
     * so the two window groups stay apart and only group 2 is EAGLE. vLLM 0.33 semantics. */
    prefixhit_group_spec ident[NUM_GROUPS];
    prefixhit_config ic = config;
    prefixhit_coordinator* ic_coord = NULL;
    int partial = -1;
    memcpy(ident, groups, sizeof ident);
    ident[2].identity = "{\"head_size_v\":128}";
    ic.groups = ident;
    ic.semantics = PREFIXHIT_SEMANTICS_VLLM_0_33;
    OK(prefixhit_coordinator_create(&ic, &ic_coord));
    OK(prefixhit_coordinator_eagle_group_ids(ic_coord, ids, 4, &count));
    CHECK(count == 1 && ids[0] == 2);
    OK(prefixhit_coordinator_num_spec_groups(ic_coord, &count));
    CHECK(count == 3);
    prefixhit_coordinator_destroy(ic_coord);
    /* Partial hits: the engine rule, and a forced value under 0.33. */
    OK(prefixhit_partial_hits_rule(groups, NUM_GROUPS, H, 1, &partial));
    CHECK(partial == 0);
    ic.groups = groups;
    ic.enable_partial_hash_hits = PREFIXHIT_PARTIAL_ON;
    OK(prefixhit_coordinator_create(&ic, &ic_coord));
    OK(prefixhit_coordinator_partial_hash_hits(ic_coord, &partial));
    CHECK(partial == 1);
    OK(prefixhit_coordinator_lookup_alignment(ic_coord, &value));
    CHECK(value == H);
    prefixhit_coordinator_destroy(ic_coord);
    /* pr49069 derives the flag: a contradicting value is an invalid configuration. */
    ic.semantics = PREFIXHIT_SEMANTICS_PR49069;
    CHECK(prefixhit_coordinator_create(&ic, &ic_coord) == PREFIXHIT_STATUS_INVALID_CONFIG);
    CHECK(ic_coord == NULL);
  }
  CHECK(prefixhit_coordinator_num_groups(NULL, &num_groups) == PREFIXHIT_STATUS_INVALID_ARGUMENT);
  OK(prefixhit_coordinator_num_groups(coord, &num_groups));
  CHECK(strcmp(prefixhit_last_error(), "") == 0); /* success clears the message */

  /* Release everything (destroying NULL is a no-op). */
  prefixhit_block_index_destroy(index);
  prefixhit_key_set_destroy(set);
  prefixhit_coordinator_destroy(coord);
  prefixhit_coordinator_destroy(NULL);
  prefixhit_lookup_result_destroy(NULL);

  printf("prefixhit %s C ABI example: %s\n", prefixhit_version(),
         failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
