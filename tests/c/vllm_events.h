/* vLLM KV events for the C ABI mirror tests, written here byte by byte in msgpack: tagged-map
 * BlockStored / BlockRemoved events with 64-bit integer hashes over G groups, AllBlocksCleared,
 * and the three-frame message (topic, big-endian seq, payload) a vLLM publisher sends. The
 * including file defines K (keys) and G (groups) first and includes random.h; `hashes` holds the
 * K hashes (the test fills them) and `present` what the published events leave in the store. */
#ifndef PREFIXHIT_TESTS_C_VLLM_EVENTS_H
#define PREFIXHIT_TESTS_C_VLLM_EVENTS_H

#include <stdint.h>
#include <string.h>
#include <zmq.h>

/* ---- a msgpack writer: just what the events need ---- */
static uint8_t buf[1 << 16];
static size_t len;

static void put(uint8_t byte) {
  if (len < sizeof buf) {
    buf[len++] = byte;
  }
}
static void put_be(uint64_t v, int bytes) {
  int i;
  for (i = bytes - 1; i >= 0; --i) {
    put((uint8_t)(v >> (8 * i)));
  }
}
static void put_str(const char* s) { /* fixstr (< 32 bytes) */
  const size_t n = strlen(s);
  put((uint8_t)(0xa0 | n));
  while (*s != '\0') {
    put((uint8_t)*s++);
  }
}
static void put_array(size_t n) { /* array 16 */
  put(0xdc);
  put_be(n, 2);
}
static void put_u64(uint64_t v) {
  put(0xcf);
  put_be(v, 8);
}

static uint64_t hashes[K];
static int present[G][K]; /* what the published events leave in the store */
static size_t chosen[16];

/* One event: stores an absent run of keys, or removes some present ones, of group g. */
static void put_event(int stored) {
  const int g = (int)(next() % G);
  size_t n = 0, i;
  if (stored) {
    const size_t start = (size_t)(next() % K);
    for (i = start; i < K && n < 16; ++i) {
      if (!present[g][i]) {
        chosen[n++] = i;
        present[g][i] = 1;
      }
    }
  } else {
    for (i = 0; i < 64 && n < 8; ++i) {
      const size_t k = (size_t)(next() % K);
      if (present[g][k]) {
        chosen[n++] = k;
        present[g][k] = 0;
      }
    }
  }
  put((uint8_t)(stored ? 0x87 : 0x84)); /* fixmap */
  put_str("type");
  put_str(stored ? "BlockStored" : "BlockRemoved");
  put_str("block_hashes");
  put_array(n);
  for (i = 0; i < n; ++i) {
    put_u64(hashes[chosen[i]]);
  }
  if (stored) {
    put_str("parent_block_hash");
    put(0xc0); /* nil */
    put_str("token_ids");
    put_array(0);
    put_str("block_size");
    put(16);
  }
  put_str("medium");
  put_str("GPU");
  put_str("group_idx");
  put((uint8_t)g);
}

/* [ts, events, dp_rank]: `cleared` sends one AllBlocksCleared, else 1-3 random events. */
static void make_payload(int cleared) {
  int e, events;
  len = 0;
  put(0x93);
  put(0xcb); /* float64 1.0 */
  put_be(0x3ff0000000000000ULL, 8);
  if (cleared) {
    put(0x91);
    put(0x81); /* {"type": "AllBlocksCleared"} */
    put_str("type");
    put_str("AllBlocksCleared");
    memset(present, 0, sizeof present);
  } else {
    events = 1 + (int)(next() % 3);
    put((uint8_t)(0x90 | events));
    for (e = 0; e < events; ++e) {
      put_event(next() % 3 != 0);
    }
  }
  put(0x00);
}

static void publish(void* pub, uint64_t seq) {
  uint8_t seq_be[8];
  int i;
  for (i = 0; i < 8; ++i) {
    seq_be[i] = (uint8_t)(seq >> (8 * (7 - i)));
  }
  zmq_send(pub, "kv", 2, ZMQ_SNDMORE);
  zmq_send(pub, seq_be, 8, ZMQ_SNDMORE);
  zmq_send(pub, buf, len, 0);
}

#endif
