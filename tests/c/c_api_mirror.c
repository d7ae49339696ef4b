/* The event mirror through the C ABI: error statuses, one real message from a libzmq PUB socket
 * (a fixed msgpack vector: [1.0, [["AllBlocksCleared"]], 0]) reaching the mirror, and then
 * random BlockStored / BlockRemoved / AllBlocksCleared events (tests/c/vllm_events.h) mirrored
 * into a CPU index with the queue bounded to one message and one hash (queue_capacity,
 * queue_max_keys): after each window the index must hold exactly what was published. Seeded:
 * PREFIXHIT_TEST_SEED replays. */
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "prefixhit/prefixhit.h"
#include "random.h"

enum { K = 192, G = 2, W = 8, MESSAGES = 64, CHECK_EVERY = 8 };

#include "vllm_events.h" /* after K and G */

static uint8_t keys[K * W];
static uint8_t answers[K];

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              prefixhit_last_error());                                                         \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

static const unsigned char kPayload[] = {0x93, 0xcb, 0x3f, 0xf0, 0,   0,   0,   0,   0,   0,
                                         0x91, 0x91, 0xb0, 'A',  'l', 'l', 'B', 'l', 'o', 'c',
                                         'k',  's',  'C',  'l',  'e', 'a', 'r', 'e', 'd', 0x00};

int main(void) {
  if (!prefixhit_mirror_available()) {
    printf("c_api_mirror: built without the event mirror; nothing to test\n");
    return 0;
  }
  prefixhit_block_index* index = NULL;
  CHECK(prefixhit_block_index_create(NULL, &index) == PREFIXHIT_OK);
  prefixhit_mirror* mirror = NULL;
  CHECK(prefixhit_mirror_create(NULL, index, &mirror) == PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(mirror == NULL && strstr(prefixhit_last_error(), "options") != NULL);

  void* ctx = zmq_ctx_new();
  void* pub = zmq_socket(ctx, ZMQ_PUB);
  CHECK(zmq_bind(pub, "tcp://127.0.0.1:*") == 0);
  char endpoint[256];
  size_t len = sizeof endpoint;
  CHECK(zmq_getsockopt(pub, ZMQ_LAST_ENDPOINT, endpoint, &len) == 0);

  const char* bad[] = {"bogus://nowhere"};
  prefixhit_mirror_options options;
  memset(&options, 0, sizeof options);
  options.format = PREFIXHIT_EVENTS_VLLM;
  options.endpoints = bad;
  options.num_endpoints = 1;
  CHECK(prefixhit_mirror_create(&options, index, &mirror) == PREFIXHIT_STATUS_INVALID_ARGUMENT);
  const char* endpoints[] = {endpoint};
  options.endpoints = endpoints;
  CHECK(prefixhit_mirror_create(&options, index, &mirror) == PREFIXHIT_OK);

  /* Publish until the mirror has one (the first ones may go out before SUB connects). */
  int reached = 0;
  for (unsigned seq = 0; seq < 200 && !reached; ++seq) {
    unsigned char seq_be[8] = {0, 0, 0, 0, 0, 0, (unsigned char)(seq >> 8), (unsigned char)seq};
    zmq_send(pub, "kv", 2, ZMQ_SNDMORE);
    zmq_send(pub, seq_be, 8, ZMQ_SNDMORE);
    zmq_send(pub, kPayload, sizeof kPayload, 0);
    CHECK(prefixhit_mirror_wait_for_seq(mirror, 0, 0.05, &reached) == PREFIXHIT_OK);
  }
  CHECK(reached == 1);
  prefixhit_mirror_stats stats;
  CHECK(prefixhit_mirror_get_stats(mirror, &stats) == PREFIXHIT_OK);
  CHECK(stats.has_seq == 1 && stats.events_cleared >= 1 && stats.malformed_messages == 0);
  CHECK(prefixhit_mirror_wait_for_seq(mirror, 0, -1.0, &reached) ==
        PREFIXHIT_STATUS_INVALID_ARGUMENT);
  CHECK(prefixhit_mirror_stop(mirror) == PREFIXHIT_OK);
  prefixhit_mirror_destroy(mirror);
  prefixhit_mirror_destroy(NULL);
  printf("c_api_mirror: one message ok (%llu messages)\n", (unsigned long long)stats.messages);

  /* Random events under the tightest queue bounds: nothing may be lost or reordered. */
  const uint64_t seed = test_seed();
  printf("c_api_mirror seed %llu (replay with PREFIXHIT_TEST_SEED=%llu)\n",
         (unsigned long long)seed, (unsigned long long)seed);
  seed_rng(seed);
  for (int k = 0; k < K; ++k) {
    hashes[k] = (next() << 8) | (uint64_t)k; /* distinct: the low bits are the index */
    for (int b = 0; b < W; ++b) {
      keys[k * W + b] = (uint8_t)(hashes[k] >> (8 * (W - 1 - b)));
    }
  }
  options.queue_capacity = 1;
  options.queue_max_keys = 1;
  CHECK(prefixhit_mirror_create(&options, index, &mirror) == PREFIXHIT_OK);
  make_payload(1);
  reached = 0;
  uint64_t seq = 1000; /* a new mirror: any first seq */
  for (; seq < 1400 && !reached; ++seq) {
    publish(pub, seq);
    CHECK(prefixhit_mirror_wait_for_seq(mirror, seq, 0.05, &reached) == PREFIXHIT_OK);
  }
  CHECK(reached == 1);
  int mismatches = 0;
  for (int m = 0; m < MESSAGES; ++m, ++seq) {
    make_payload(m == MESSAGES / 2);
    publish(pub, seq);
    if ((m + 1) % CHECK_EVERY != 0) {
      continue;
    }
    CHECK(prefixhit_mirror_wait_for_seq(mirror, seq, 30.0, &reached) == PREFIXHIT_OK);
    CHECK(reached == 1);
    for (int g = 0; g < G; ++g) {
      CHECK(prefixhit_block_index_contains_width(index, 0, g, W, keys, K, answers) == PREFIXHIT_OK);
      for (int k = 0; k < K; ++k) {
        mismatches += answers[k] != (present[g][k] ? 1 : 0);
      }
    }
  }
  CHECK(prefixhit_mirror_get_stats(mirror, &stats) == PREFIXHIT_OK);
  printf(
      "c_api_mirror: %llu messages, %llu stored / %llu removed hashes, %llu waits on the queue\n",
      (unsigned long long)stats.messages, (unsigned long long)stats.hashes_stored,
      (unsigned long long)stats.hashes_removed, (unsigned long long)stats.backpressure);
  if (mismatches != 0) {
    fprintf(stderr, "c_api_mirror: %d answers differ from the published events (seed %llu)\n",
            mismatches, (unsigned long long)seed);
    return 1;
  }
  CHECK(stats.malformed_messages == 0 && stats.malformed_events == 0 && stats.failed_events == 0);
  CHECK(stats.hashes_stored > 0 && stats.hashes_removed > 0 && stats.events_cleared >= 2);
  CHECK(prefixhit_mirror_stop(mirror) == PREFIXHIT_OK);
  prefixhit_mirror_destroy(mirror);
  zmq_close(pub);
  zmq_ctx_term(ctx);
  prefixhit_block_index_destroy(index);
  printf("c_api_mirror: ok\n");
  return 0;
}
