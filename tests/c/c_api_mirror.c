/* The event mirror through the C ABI: error statuses, and one real message from a libzmq PUB
 * socket (a fixed msgpack vector: [1.0, [["AllBlocksCleared"]], 0]) reaching the mirror. */
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "prefixhit/prefixhit.h"

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
  zmq_close(pub);
  zmq_ctx_term(ctx);
  prefixhit_block_index_destroy(index);
  printf("c_api_mirror: ok (%llu messages)\n", (unsigned long long)stats.messages);
  return 0;
}
