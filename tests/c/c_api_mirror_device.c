/* The event mirror into a device index through the C ABI (prefixhit_mirror_create_device). A
 * libzmq PUB socket publishes vLLM KV events (msgpack written here byte by byte: tagged-map
 * BlockStored / BlockRemoved events with 64-bit integer hashes over two groups, and
 * AllBlocksCleared); after each batch of messages, prefixhit_mirror_wait_for_seq, then
 * prefixhit_device_block_index_contains_width (8-byte keys: a hash's big-endian bytes) must
 * answer exactly what was published, and GPU lookups of the mirrored index equal CPU lookups of a
 * block index holding the same keys. While the mirror's thread applies a window of events, this
 * thread keeps calling the device index and the GPU lookup (the handle's mutex makes that safe).
 * Without a device: PREFIXHIT_STATUS_UNAVAILABLE. Seeded: PREFIXHIT_TEST_SEED replays. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "check.h"
#include "gpu_lookups.h"
#include "prefixhit/prefixhit.h"
#include "random.h"

static int failures = 0;

enum { K = 192, G = 2, W = 8, R = 4, MESSAGES = 48, CHECK_EVERY = 8 };

#include "vllm_events.h" /* after K and G */

static uint8_t keys[K * W];
static uint8_t answers[K];
static int64_t offsets[R + 1], max_lengths[R];
static int64_t gpu_hits[R], gpu_blocks[R * G], gpu_placeholders[R * G];

/* The device index against the published state: contains, size, and lookups. */
static int compare(const prefixhit_coordinator* coord, const prefixhit_gpu_engine* engine,
                   const prefixhit_device_block_index* gpu) {
  prefixhit_block_index* cpu = NULL;
  size_t size = 0, expected = 0;
  int g, k, agree, hits;
  OK(prefixhit_block_index_create(NULL, &cpu));
  for (g = 0; g < G; ++g) {
    OK(prefixhit_device_block_index_contains_width(gpu, 0, g, W, keys, K, answers));
    for (k = 0; k < K; ++k) {
      CHECK(answers[k] == (uint8_t)present[g][k]);
      if (present[g][k]) {
        ++expected;
        OK(prefixhit_block_index_insert_width(cpu, 0, g, W, keys + k * W, 1, NULL));
      }
    }
  }
  OK(prefixhit_device_block_index_size(gpu, &size));
  CHECK(size == expected);
  hits =
      lookups_on_both(coord, engine, cpu, gpu, 0, keys, offsets, max_lengths, NULL, R, G, &agree);
  CHECK(agree);
  prefixhit_block_index_destroy(cpu);
  return hits;
}

int main(void) {
  const uint64_t seed = test_seed();
  const int gpu_ok = prefixhit_gpu_available();
  prefixhit_group_spec groups[G];
  prefixhit_config config;
  prefixhit_block_index_options index_options;
  prefixhit_mirror_options options;
  prefixhit_mirror_stats stats;
  prefixhit_coordinator* coord = NULL;
  prefixhit_gpu_engine* engine = NULL;
  prefixhit_device_block_index* gpu = NULL;
  prefixhit_mirror* mirror = NULL;
  const char* endpoints[1];
  char endpoint[256];
  size_t endpoint_len = sizeof endpoint;
  void* ctx;
  void* pub;
  uint64_t seq = 0;
  int reached = 0, m, k, b, r, hits = 0, concurrent = 0;

  printf("c_api_mirror_device seed %llu (replay with PREFIXHIT_TEST_SEED=%llu), GPU %s\n",
         (unsigned long long)seed, (unsigned long long)seed, gpu_ok ? "available" : "unavailable");
  seed_rng(seed);
  memset(&options, 0, sizeof options);
  options.format = PREFIXHIT_EVENTS_VLLM;
  if (!gpu_ok || !prefixhit_mirror_available()) {
    endpoints[0] = "tcp://127.0.0.1:1";
    options.endpoints = endpoints;
    options.num_endpoints = 1;
    FAILS(prefixhit_mirror_create_device(&options, NULL, &mirror), PREFIXHIT_STATUS_UNAVAILABLE);
    CHECK(mirror == NULL);
    printf("c_api_mirror_device: %s\n", failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
  }

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
  config.digest_size = W;
  OK(prefixhit_coordinator_create(&config, &coord));
  OK(prefixhit_gpu_engine_create(coord, &engine));
  memset(&index_options, 0, sizeof index_options);
  index_options.initial_capacity = 64; /* grows while the mirror writes */
  OK(prefixhit_device_block_index_create(&index_options, &gpu));

  /* Distinct hashes (the low bits are the index), as keys: their big-endian bytes. Requests
   * look up runs of them. */
  for (k = 0; k < K; ++k) {
    hashes[k] = (next() << 8) | (uint64_t)k;
    for (b = 0; b < W; ++b) {
      keys[k * W + b] = (uint8_t)(hashes[k] >> (8 * (W - 1 - b)));
    }
  }
  offsets[0] = 0;
  for (r = 0; r < R; ++r) {
    offsets[r + 1] = offsets[r] + K / R;
    max_lengths[r] = (int64_t)(next() % (K / R * 4 + 1));
  }

  ctx = zmq_ctx_new();
  pub = zmq_socket(ctx, ZMQ_PUB);
  CHECK(zmq_bind(pub, "tcp://127.0.0.1:*") == 0);
  CHECK(zmq_getsockopt(pub, ZMQ_LAST_ENDPOINT, endpoint, &endpoint_len) == 0);
  endpoints[0] = endpoint;
  options.endpoints = endpoints;
  options.num_endpoints = 1;
  FAILS(prefixhit_mirror_create_device(&options, NULL, &mirror), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  FAILS(prefixhit_mirror_create_device(NULL, gpu, &mirror), PREFIXHIT_STATUS_INVALID_ARGUMENT);
  OK(prefixhit_mirror_create_device(&options, gpu, &mirror));

  /* Clears until the subscription is up (the first ones may go out before it connects). */
  make_payload(1);
  for (seq = 0; seq < 400 && !reached; ++seq) {
    publish(pub, seq);
    OK(prefixhit_mirror_wait_for_seq(mirror, seq, 0.05, &reached));
  }
  CHECK(reached == 1);

  for (m = 0; m < MESSAGES; ++m, ++seq) {
    make_payload(m == MESSAGES / 2); /* one AllBlocksCleared half way */
    publish(pub, seq);
    if ((m + 1) % CHECK_EVERY != 0) {
      continue;
    }
    /* A window of messages is out: the mirror applies them on its own thread while this one
     * keeps calling the index and the GPU lookup, until the last has been applied. */
    reached = 0;
    for (k = 0; k < 1000 && !reached; ++k) {
      OK(prefixhit_device_block_index_contains_width(gpu, 0, (int)(next() % G), W, keys, K,
                                                     answers));
      OK(prefixhit_find_longest_cache_hits_gpu(engine, keys, (size_t)offsets[R], offsets,
                                               max_lengths, NULL, R, gpu, 0, gpu_hits, gpu_blocks,
                                               gpu_placeholders));
      OK(prefixhit_mirror_wait_for_seq(mirror, seq, 0.0, &reached));
      concurrent += reached ? 0 : 1;
    }
    OK(prefixhit_mirror_wait_for_seq(mirror, seq, 30.0, &reached));
    CHECK(reached == 1);
    hits += compare(coord, engine, gpu);
  }
  OK(prefixhit_mirror_get_stats(mirror, &stats));
  printf(
      "c_api_mirror_device: %llu messages, %llu stored / %llu removed hashes, %d requests with "
      "a hit, %d rounds of calls while the mirror was behind\n",
      (unsigned long long)stats.messages, (unsigned long long)stats.hashes_stored,
      (unsigned long long)stats.hashes_removed, hits, concurrent);
  CHECK(stats.malformed_messages == 0 && stats.malformed_events == 0 && stats.failed_events == 0);
  CHECK(stats.hashes_stored > 0 && stats.hashes_removed > 0 && stats.events_cleared >= 1);
  CHECK(stats.index_keys == stats.keys);

  /* A last AllBlocksCleared empties the index. */
  make_payload(1);
  publish(pub, seq);
  OK(prefixhit_mirror_wait_for_seq(mirror, seq, 30.0, &reached));
  CHECK(reached == 1);
  compare(coord, engine, gpu);

  OK(prefixhit_mirror_stop(mirror));
  prefixhit_mirror_destroy(mirror); /* before the index it writes to */
  zmq_close(pub);
  zmq_ctx_term(ctx);
  prefixhit_device_block_index_destroy(gpu);
  prefixhit_gpu_engine_destroy(engine);
  prefixhit_coordinator_destroy(coord);
  if (failures != 0) {
    fprintf(stderr, "c_api_mirror_device: %d checks failed (seed %llu)\n", failures,
            (unsigned long long)seed);
    return 1;
  }
  printf("c_api_mirror_device: ok\n");
  return 0;
}
