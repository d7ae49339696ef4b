/* One batch through both engines, for the C ABI's GPU tests: prefixhit_find_longest_cache_hits on
 * a CPU block index and prefixhit_find_longest_cache_hits_gpu on a device index (same namespace,
 * same EAGLE flags). The GPU outputs are first filled with 0xFF, so a call that writes nothing
 * cannot pass for one that agrees. Needs check.h (OK exits on a failed call). */
#ifndef PREFIXHIT_TESTS_C_GPU_LOOKUPS_H
#define PREFIXHIT_TESTS_C_GPU_LOOKUPS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prefixhit/prefixhit.h"

/* The requests with a hit (on the CPU); *agree is 1 when every output of the two calls is equal
 * (hit lengths, blocks and placeholders of every group), else 0. */
static int lookups_on_both(const prefixhit_coordinator* coord, const prefixhit_gpu_engine* engine,
                           const prefixhit_block_index* cpu,
                           const prefixhit_device_block_index* gpu, uint32_t ns,
                           const uint8_t* digests, const int64_t* offsets,
                           const int64_t* max_lengths, const uint8_t* apply_eagle,
                           size_t num_requests, size_t num_groups, int* agree) {
  const size_t rows = num_requests;
  const size_t cells = num_requests * num_groups;
  const size_t each = rows + 2 * cells; /* one engine's outputs, laid out back to back */
  int64_t* out = (int64_t*)malloc(sizeof(int64_t) * (2 * each + 1));
  int64_t *cpu_hits, *cpu_blocks, *cpu_placeholders, *gpu_hits, *gpu_blocks, *gpu_placeholders;
  prefixhit_store store;
  size_t r;
  int hits = 0;
  if (out == NULL) {
    fprintf(stderr, "lookups_on_both: out of memory\n");
    exit(1);
  }
  cpu_hits = out;
  cpu_blocks = cpu_hits + rows;
  cpu_placeholders = cpu_blocks + cells;
  gpu_hits = cpu_placeholders + cells;
  gpu_blocks = gpu_hits + rows;
  gpu_placeholders = gpu_blocks + cells;
  memset(&store, 0, sizeof store);
  store.block_index = cpu;
  store.ns = ns;
  OK(prefixhit_find_longest_cache_hits(coord, digests, (size_t)offsets[num_requests], offsets,
                                       max_lengths, apply_eagle, num_requests, &store, 1, cpu_hits,
                                       cpu_blocks, cpu_placeholders));
  memset(gpu_hits, 0xFF, sizeof(int64_t) * each);
  OK(prefixhit_find_longest_cache_hits_gpu(engine, digests, (size_t)offsets[num_requests], offsets,
                                           max_lengths, apply_eagle, num_requests, gpu, ns,
                                           gpu_hits, gpu_blocks, gpu_placeholders));
  *agree = memcmp(cpu_hits, gpu_hits, sizeof(int64_t) * each) == 0;
  for (r = 0; r < num_requests; ++r) {
    hits += cpu_hits[r] > 0 ? 1 : 0;
  }
  free(out);
  return hits;
}

#endif
