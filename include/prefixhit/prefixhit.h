/* The C ABI of prefixhit: prefix-hit lookups for LLM serving, callable from C, Rust, Go, ...
 *
 * Conventions
 *   - Every function that can fail returns a prefixhit_status; PREFIXHIT_OK is 0. On failure,
 *     prefixhit_last_error() returns a message naming the problem. The message is thread-local
 *     and stays valid until the next prefixhit call on the same thread.
 *   - Objects are opaque handles created by *_create (or returned by a call) and released by
 *     *_destroy. Destroying NULL is a no-op.
 *   - No C++ exception ever crosses this boundary; allocation failure is
 *     PREFIXHIT_STATUS_OUT_OF_MEMORY.
 *   - Digests are 32 bytes each, passed as `const uint8_t*` to n * 32 contiguous bytes.
 *   - A coordinator is immutable after creation and may be used from many threads at once. A
 *     block index (CPU or device) is thread-safe. A key set may be read from many threads but
 *     not written while it is read.
 *
 * Semantics follow the reference coordinator (see SEMANTICS.md of the conformance set).
 */
#ifndef PREFIXHIT_PREFIXHIT_H_
#define PREFIXHIT_PREFIXHIT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define PREFIXHIT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define PREFIXHIT_API __attribute__((visibility("default")))
#else
#define PREFIXHIT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ----------------------------------------------------------------------------------
 * Values 0..11 mirror prefixhit::ErrorKind (include/prefixhit/error_kind.hpp); the last two are
 * failures of the boundary itself. */
typedef enum prefixhit_status {
  PREFIXHIT_OK = 0,
  PREFIXHIT_STATUS_INVALID_CONFIG = 1,
  PREFIXHIT_STATUS_UNALIGNED_LENGTH = 2,
  PREFIXHIT_STATUS_UNSUPPORTED_EAGLE_CHUNKED_LOCAL = 3,
  PREFIXHIT_STATUS_UNSUPPORTED_ALIGNMENT_CHUNKED_LOCAL = 4,
  PREFIXHIT_STATUS_UNSUPPORTED_ALIGNMENT_SLIDING_WINDOW = 5,
  PREFIXHIT_STATUS_INVALID_ARGUMENT = 6,
  PREFIXHIT_STATUS_CAPACITY_EXCEEDED = 7,
  PREFIXHIT_STATUS_IO_ERROR = 8,
  PREFIXHIT_STATUS_FORMAT_ERROR = 9,
  PREFIXHIT_STATUS_CUDA_ERROR = 10,
  PREFIXHIT_STATUS_UNAVAILABLE = 11,
  PREFIXHIT_STATUS_OUT_OF_MEMORY = 64, /* std::bad_alloc */
  PREFIXHIT_STATUS_INTERNAL = 65       /* any other unexpected failure */
} prefixhit_status;

/* The message of the last failed call on this thread ("" if the last call succeeded). */
PREFIXHIT_API const char* prefixhit_last_error(void);
/* The snake_case name of a status ("ok", "invalid_config", ...). Never NULL. */
PREFIXHIT_API const char* prefixhit_status_name(prefixhit_status status);
/* The library version, e.g. "0.1.0". */
PREFIXHIT_API const char* prefixhit_version(void);

/* ---- configuration ------------------------------------------------------------------------- */

enum { PREFIXHIT_DIGEST_SIZE = 32, PREFIXHIT_MAX_GROUPS = 32 };

typedef enum prefixhit_group_kind {
  PREFIXHIT_FULL_ATTENTION = 0,
  PREFIXHIT_MLA_ATTENTION = 1,
  PREFIXHIT_SLIDING_WINDOW = 2,
  PREFIXHIT_SLIDING_WINDOW_MLA = 3,
  PREFIXHIT_CHUNKED_LOCAL = 4,
  PREFIXHIT_MAMBA = 5,
  PREFIXHIT_CIRCULAR_BUFFER = 6 /* vllm-0.33 only; never prefix-cacheable */
} prefixhit_group_kind;

/* The reference release to reproduce (SEMANTICS.md 11). Zero is pr49069. */
typedef enum prefixhit_semantics {
  PREFIXHIT_SEMANTICS_PR49069 = 0,
  PREFIXHIT_SEMANTICS_VLLM_0_33 = 1
} prefixhit_semantics;

/* Partial hash hits: AUTO (zero) derives them (pr49069: rule 1.3; vllm-0.33: the engine rule,
 * prefixhit_partial_hits_rule); OFF / ON set them (vllm-0.33), or must agree with rule 1.3
 * (pr49069, else PREFIXHIT_STATUS_INVALID_CONFIG). */
typedef enum prefixhit_partial_hits {
  PREFIXHIT_PARTIAL_AUTO = 0,
  PREFIXHIT_PARTIAL_OFF = 1,
  PREFIXHIT_PARTIAL_ON = 2
} prefixhit_partial_hits;

typedef enum prefixhit_mamba_cache_mode {
  PREFIXHIT_MAMBA_NONE = 0,
  PREFIXHIT_MAMBA_ALIGN = 1,
  PREFIXHIT_MAMBA_ALL = 2
} prefixhit_mamba_cache_mode;

/* One KV-cache group's spec. Zero-initialise, then set what the kind needs. */
typedef struct prefixhit_group_spec {
  prefixhit_group_kind kind;
  int64_t block_size;
  int eagle; /* nonzero: the group holds EAGLE/MTP draft layers */
  int64_t num_kv_heads;
  int64_t head_size;
  const char* dtype; /* NULL is "" */
  /* Window and chunk in tokens; 0 means "not set" (a set value must be positive). */
  int64_t sliding_window;
  int64_t attention_chunk_size;
  prefixhit_mamba_cache_mode mamba_cache_mode;
  int64_t state_dim;
  /* vllm-0.33: window kinds' extra retained tokens; sliding_window_mla's bounded replay. */
  int64_t extra_retained_tokens;
  int bounded_replay;
  /* Every other field of the real spec as canonical text (compact JSON, sorted keys), compared
   * byte for byte for spec equality; NULL or "" is none. */
  const char* identity;
} prefixhit_group_spec;

/* retention_interval: PREFIXHIT_NO_RETENTION_INTERVAL for the reference's None. */
#define PREFIXHIT_NO_RETENTION_INTERVAL (-1)
/* num_prompt_tokens of store_mask: PREFIXHIT_NO_PROMPT_LENGTH when not supplied. */
#define PREFIXHIT_NO_PROMPT_LENGTH (-1)

typedef struct prefixhit_config {
  int64_t hash_block_size;      /* H */
  int64_t scheduler_block_size; /* S */
  int use_eagle;
  int64_t retention_interval; /* PREFIXHIT_NO_RETENTION_INTERVAL, 0 or positive */
  const prefixhit_group_spec* groups;
  size_t num_groups;
  /* Bytes per block hash: 8, 16 or 32 (0 means 32). Every digest array a call on this
   * coordinator takes (hashes, batch digests) is num_digests * digest_size bytes, and its store
   * must hold keys of this width (a key set created with it; a block index is read at it). */
  size_t digest_size;
  prefixhit_semantics semantics;
  prefixhit_partial_hits enable_partial_hash_hits;
} prefixhit_config;

/* vLLM 0.33's engine rule for partial hash hits (SEMANTICS.md 11.1): *out = 1 or 0.
 * dcp_world_size is the decode-context-parallel world size (1 without DCP). */
PREFIXHIT_API prefixhit_status prefixhit_partial_hits_rule(const prefixhit_group_spec* groups,
                                                           size_t num_groups,
                                                           int64_t hash_block_size,
                                                           int64_t dcp_world_size, int* out);

/* ---- handles ------------------------------------------------------------------------------- */

typedef struct prefixhit_coordinator prefixhit_coordinator;
typedef struct prefixhit_key_set prefixhit_key_set;
typedef struct prefixhit_block_index prefixhit_block_index;
typedef struct prefixhit_lookup_result prefixhit_lookup_result;
typedef struct prefixhit_chunk_masks prefixhit_chunk_masks;

/* ---- coordinator --------------------------------------------------------------------------- */

/* Validates the configuration (PREFIXHIT_STATUS_INVALID_CONFIG) and plans the spec groups. */
PREFIXHIT_API prefixhit_status prefixhit_coordinator_create(const prefixhit_config* config,
                                                            prefixhit_coordinator** out);
PREFIXHIT_API void prefixhit_coordinator_destroy(prefixhit_coordinator* coordinator);

PREFIXHIT_API prefixhit_status
prefixhit_coordinator_num_groups(const prefixhit_coordinator* coordinator, int32_t* out);
/* A: hash_block_size with partial hash hits, else scheduler_block_size. */
PREFIXHIT_API prefixhit_status
prefixhit_coordinator_lookup_alignment(const prefixhit_coordinator* coordinator, int64_t* out);
PREFIXHIT_API prefixhit_status
prefixhit_coordinator_partial_hash_hits(const prefixhit_coordinator* coordinator, int* out);
/* Sorted EAGLE group ids. Writes min(count, capacity) ids to `ids` (may be NULL when capacity
 * is 0) and the total to *count. */
PREFIXHIT_API prefixhit_status prefixhit_coordinator_eagle_group_ids(
    const prefixhit_coordinator* coordinator, int32_t* ids, size_t capacity, size_t* count);
/* Spec groups (equal specs merged, full attention first), in processing order. */
PREFIXHIT_API prefixhit_status
prefixhit_coordinator_num_spec_groups(const prefixhit_coordinator* coordinator, size_t* out);
/* Spec group k: writes min(members, capacity) member ids (ascending) to `member_ids`, the total
 * to *num_members and its EAGLE flag to *use_eagle (either may be NULL). */
PREFIXHIT_API prefixhit_status prefixhit_coordinator_spec_group(
    const prefixhit_coordinator* coordinator, size_t k, int32_t* member_ids, size_t capacity,
    size_t* num_members, int* use_eagle);
PREFIXHIT_API prefixhit_status prefixhit_coordinator_align_lookup_length(
    const prefixhit_coordinator* coordinator, int64_t length, int64_t* out);
/* The configuration's digest_size (8, 16 or 32). */
PREFIXHIT_API prefixhit_status
prefixhit_coordinator_digest_size(const prefixhit_coordinator* coordinator, size_t* out);

/* ---- stores -------------------------------------------------------------------------------- */

/* Digest widths: a digest is 8, 16 or 32 bytes (PREFIXHIT_DIGEST_SIZE); keys of different widths
 * are different keys. Calls without a width take 32-byte digests. */

/* A caller-supplied set of (group id, key) pairs, of 32-byte keys or (create_width) of
 * digest_size-byte keys. */
PREFIXHIT_API prefixhit_status prefixhit_key_set_create(prefixhit_key_set** out);
PREFIXHIT_API prefixhit_status prefixhit_key_set_create_width(size_t digest_size,
                                                              prefixhit_key_set** out);
PREFIXHIT_API void prefixhit_key_set_destroy(prefixhit_key_set* set);
/* Adds num_keys keys (num_keys * the set's digest size bytes) of one group; *added (may be NULL)
 * counts new ones. */
PREFIXHIT_API prefixhit_status prefixhit_key_set_insert(prefixhit_key_set* set, int32_t group_id,
                                                        const uint8_t* keys, size_t num_keys,
                                                        size_t* added);
PREFIXHIT_API prefixhit_status prefixhit_key_set_size(const prefixhit_key_set* set, size_t* out);

/* The resident CPU block index. options may be NULL for the defaults. */
/* Bounds (else PREFIXHIT_STATUS_INVALID_ARGUMENT): max_load_factor in [0.01, 0.95],
 * max_capacity 0 or in [32, 2^40] slots; initial_capacity above 2^40 is CAPACITY_EXCEEDED. */
typedef struct prefixhit_block_index_options {
  size_t initial_capacity; /* 0: the default (65536 slots) */
  double max_load_factor;  /* 0: the default (0.8) */
  size_t max_capacity;     /* 0: unbounded */
  uint64_t seed;           /* 0: a random seed */
} prefixhit_block_index_options;

PREFIXHIT_API prefixhit_status prefixhit_block_index_create(
    const prefixhit_block_index_options* options, prefixhit_block_index** out);
PREFIXHIT_API void prefixhit_block_index_destroy(prefixhit_block_index* index);
PREFIXHIT_API prefixhit_status prefixhit_block_index_insert(prefixhit_block_index* index,
                                                            uint32_t ns, int32_t group_id,
                                                            const uint8_t* keys, size_t num_keys,
                                                            size_t* inserted);
PREFIXHIT_API prefixhit_status prefixhit_block_index_erase(prefixhit_block_index* index,
                                                           uint32_t ns, int32_t group_id,
                                                           const uint8_t* keys, size_t num_keys,
                                                           size_t* erased);
/* present[i] = 1 if key i is in the index, else 0. */
PREFIXHIT_API prefixhit_status prefixhit_block_index_contains(const prefixhit_block_index* index,
                                                              uint32_t ns, int32_t group_id,
                                                              const uint8_t* keys, size_t num_keys,
                                                              uint8_t* present);
/* The same for keys of digest_size bytes each (8, 16 or 32): keys is num_keys * digest_size
 * bytes. A vLLM KV event's 64-bit integer hash is an 8-byte key: its big-endian bytes. */
PREFIXHIT_API prefixhit_status prefixhit_block_index_insert_width(
    prefixhit_block_index* index, uint32_t ns, int32_t group_id, size_t digest_size,
    const uint8_t* keys, size_t num_keys, size_t* inserted);
PREFIXHIT_API prefixhit_status prefixhit_block_index_erase_width(prefixhit_block_index* index,
                                                                 uint32_t ns, int32_t group_id,
                                                                 size_t digest_size,
                                                                 const uint8_t* keys,
                                                                 size_t num_keys, size_t* erased);
PREFIXHIT_API prefixhit_status prefixhit_block_index_contains_width(
    const prefixhit_block_index* index, uint32_t ns, int32_t group_id, size_t digest_size,
    const uint8_t* keys, size_t num_keys, uint8_t* present);
PREFIXHIT_API prefixhit_status prefixhit_block_index_size(const prefixhit_block_index* index,
                                                          size_t* out);

/* A lookup's store: exactly one of key_set / block_index is non-NULL. `ns` is the block index
 * namespace (ignored for a key set); above 2^24 - 1 it is PREFIXHIT_STATUS_INVALID_ARGUMENT, as
 * in prefixhit_block_index_contains. A block index is read at the coordinator's digest_size; a
 * key set must have been created with it (else PREFIXHIT_STATUS_INVALID_ARGUMENT). A key set may
 * be written by one thread while others look it up (it locks internally). Every digest count
 * (num_keys, num_hashes, num_digests) is at most 2^40 per call; a larger one is
 * PREFIXHIT_STATUS_INVALID_ARGUMENT. */
typedef struct prefixhit_store {
  const prefixhit_key_set* key_set;
  const prefixhit_block_index* block_index;
  uint32_t ns;
} prefixhit_store;

/* ---- lookups ------------------------------------------------------------------------------- */

/* The longest prefix hit of one request: hashes are num_hashes digests (num_hashes * the
 * coordinator's digest_size bytes), 0 <= max_length <
 * (num_hashes + 1) * H. apply_eagle is normally nonzero (the receive path passes 0). */
PREFIXHIT_API prefixhit_status prefixhit_find_longest_cache_hit(
    const prefixhit_coordinator* coordinator, const uint8_t* hashes, size_t num_hashes,
    int64_t max_length, const prefixhit_store* store, int apply_eagle,
    prefixhit_lookup_result** out);
/* Which blocks of an already-decided hit to read (every key present, no EAGLE drop). */
PREFIXHIT_API prefixhit_status prefixhit_load_mask(const prefixhit_coordinator* coordinator,
                                                   size_t num_hashes, int64_t token_len,
                                                   prefixhit_lookup_result** out);

PREFIXHIT_API void prefixhit_lookup_result_destroy(prefixhit_lookup_result* result);
PREFIXHIT_API prefixhit_status
prefixhit_lookup_result_hit_length(const prefixhit_lookup_result* result, int64_t* out);
PREFIXHIT_API prefixhit_status
prefixhit_lookup_result_num_groups(const prefixhit_lookup_result* result, int32_t* out);
/* Group g's block list is num_blocks entries: the first num_placeholders are placeholders
 * (false), the rest are blocks to load (true). Either output may be NULL. */
PREFIXHIT_API prefixhit_status prefixhit_lookup_result_group(const prefixhit_lookup_result* result,
                                                             int32_t group_id, int64_t* num_blocks,
                                                             int64_t* num_placeholders);
/* The reference's list for group g: mask[i] = 1 for a loaded block, 0 for a placeholder.
 * Writes min(len, capacity) entries and the full length to *len. */
PREFIXHIT_API prefixhit_status prefixhit_lookup_result_mask(const prefixhit_lookup_result* result,
                                                            int32_t group_id, uint8_t* mask,
                                                            size_t capacity, size_t* len);

/* Many lookups in one call. Request r owns digests [offsets[r], offsets[r+1]) of `digests`
 * (digests is num_digests * the coordinator's digest_size bytes; offsets has num_requests + 1
 * entries, offsets[0] == 0, offsets[num_requests] == num_digests). apply_eagle: NULL for "apply"
 * everywhere, else one flag per request. num_threads: at most this many threads (0: every
 * hardware thread); workers start only when the batch's first requests show the rest is worth
 * them (BatchOptions::min_seconds_per_worker's default). Outputs (caller-allocated):
 * hit_lengths [num_requests], num_blocks and num_placeholders [num_requests * num_groups],
 * row-major. On error nothing useful is in the outputs and the message names the first
 * failing request. */
PREFIXHIT_API prefixhit_status prefixhit_find_longest_cache_hits(
    const prefixhit_coordinator* coordinator, const uint8_t* digests, size_t num_digests,
    const int64_t* offsets, const int64_t* max_lengths, const uint8_t* apply_eagle,
    size_t num_requests, const prefixhit_store* store, int num_threads, int64_t* hit_lengths,
    int64_t* num_blocks, int64_t* num_placeholders);

/* ---- store and lookup masks ---------------------------------------------------------------- */

/* Which chunks of each group a save of tokens [start_token, aligned_token_len) writes.
 * num_prompt_tokens: PREFIXHIT_NO_PROMPT_LENGTH when not supplied. */
PREFIXHIT_API prefixhit_status prefixhit_store_mask(const prefixhit_coordinator* coordinator,
                                                    int64_t aligned_token_len, int64_t start_token,
                                                    int64_t num_prompt_tokens,
                                                    prefixhit_chunk_masks** out);
PREFIXHIT_API prefixhit_status prefixhit_lookup_mask(const prefixhit_coordinator* coordinator,
                                                     int64_t aligned_token_len,
                                                     prefixhit_chunk_masks** out);
PREFIXHIT_API void prefixhit_chunk_masks_destroy(prefixhit_chunk_masks* masks);
/* Group g's mask over chunks [first_chunk, end_chunk). *is_all = 1 is the reference's None
 * ("every chunk"), and then *keep is NULL; otherwise *keep points to end_chunk - first_chunk
 * bytes (1 = write the chunk) owned by `masks`. Any output may be NULL. */
PREFIXHIT_API prefixhit_status prefixhit_chunk_masks_get(const prefixhit_chunk_masks* masks,
                                                         int32_t group_id, int64_t* first_chunk,
                                                         int64_t* end_chunk, int* is_all,
                                                         const uint8_t** keep);

/* ---- event mirror ---------------------------------------------------------------------------
 * A block index kept in sync from KV-event streams (ZeroMQ PUB endpoints, msgpack payloads) on
 * the mirror's own threads; lookups on the index may run meanwhile. docs/mirror.md describes the
 * formats, gaps/replay and the counters. In builds without ZeroMQ/msgpack-cxx,
 * prefixhit_mirror_available() is 0 and prefixhit_mirror_create returns UNAVAILABLE. */

typedef struct prefixhit_mirror prefixhit_mirror;

typedef enum prefixhit_event_format {
  PREFIXHIT_EVENTS_VLLM = 0,    /* vLLM KV events */
  PREFIXHIT_EVENTS_MOONCAKE = 1 /* Mooncake master events (vLLM store keys in object_key) */
} prefixhit_event_format;

typedef struct prefixhit_mirror_options {
  prefixhit_event_format format;
  const char* const* endpoints; /* num_endpoints PUB endpoints, e.g. "tcp://127.0.0.1:5557" */
  size_t num_endpoints;
  const char* const* replay_endpoints; /* ROUTER replay endpoint per endpoint; NULL/"": none */
  size_t num_replay_endpoints;         /* 0 .. num_endpoints */
  uint32_t ns;                         /* index namespace the keys go to */
  const char* topic;                   /* subscription prefix; NULL: every topic */
  size_t queue_capacity;               /* 0: the default (4096 messages) */
  int32_t replay_timeout_ms;           /* 0: the default (1000) */
  /* Mooncake: a key counts while every rank namespace of tp x pcp x dcp x pp holds it
   * (0 counts as 1); keys of another model (model non-NULL and non-empty) or cache prefix
   * (cache_prefix non-NULL; "" = keys without one) are ignored. */
  int32_t tp_size, pcp_size, dcp_size, pp_size;
  const char* model;
  const char* cache_prefix;
  /* Decoded block hashes the queued messages may hold; the receiver waits past it unless the
   * queue is empty (a larger message goes through alone). 0: the default (2^20). Last, so the
   * fields above keep their offsets. */
  size_t queue_max_keys;
} prefixhit_mirror_options;

typedef struct prefixhit_mirror_stats {
  uint64_t messages, events_stored, events_removed, events_cleared;
  uint64_t hashes_stored, hashes_removed;
  uint64_t malformed_messages, malformed_events, failed_events, foreign_keys;
  uint64_t gaps, missed_messages, replays, replayed_messages, resyncs, duplicates;
  uint64_t backpressure, queue_depth;
  int has_seq;       /* 1 once a message has been applied */
  uint64_t last_seq; /* valid when has_seq */
  double lag_ms, max_lag_ms;
  uint64_t keys;       /* keys present per the mirror */
  uint64_t index_keys; /* keys in the index (all namespaces) */
} prefixhit_mirror_stats;

PREFIXHIT_API int prefixhit_mirror_available(void);
/* Starts a mirror into `index`, which must outlive it. */
PREFIXHIT_API prefixhit_status prefixhit_mirror_create(const prefixhit_mirror_options* options,
                                                       prefixhit_block_index* index,
                                                       prefixhit_mirror** out);
/* Stops (joins the threads) and frees. */
PREFIXHIT_API void prefixhit_mirror_destroy(prefixhit_mirror* mirror);
PREFIXHIT_API prefixhit_status prefixhit_mirror_stop(prefixhit_mirror* mirror);
PREFIXHIT_API prefixhit_status prefixhit_mirror_get_stats(const prefixhit_mirror* mirror,
                                                          prefixhit_mirror_stats* out);
/* *reached = 1 once a message with sequence >= seq has been applied, 0 after timeout_s. */
PREFIXHIT_API prefixhit_status prefixhit_mirror_wait_for_seq(const prefixhit_mirror* mirror,
                                                             uint64_t seq, double timeout_s,
                                                             int* reached);

/* ---- GPU index and lookups ---------------------------------------------------------------------
 * The resident index on the GPU, batch lookups against it, and an event mirror that keeps it true
 * to a store (docs/mirror.md, "C ABI"). In a build without CUDA, or with no device,
 * prefixhit_gpu_available() is 0 and every call below returns PREFIXHIT_STATUS_UNAVAILABLE with a
 * message (after the checks of its plain arguments: NULL buffers, bad counts); a handle argument
 * that is NULL there is UNAVAILABLE too (none can exist), elsewhere INVALID_ARGUMENT.
 *
 * A device block index is thread-safe: it owns a mutex that every call on it holds, and so do a
 * device mirror's writes into it and a GPU lookup of it, so a C caller needs no lock of its own
 * (calls on one index run one at a time). Keys and outputs are HOST arrays: each call copies them
 * to and from the device and returns when the work is done. */
typedef struct prefixhit_device_block_index prefixhit_device_block_index;
typedef struct prefixhit_gpu_engine prefixhit_gpu_engine;

/* 1 when the calls below can run: a CUDA build (or the CUDA emulator) with a device; else 0. */
PREFIXHIT_API int prefixhit_gpu_available(void);

/* A block index in GPU memory. options may be NULL for the defaults; its fields mean what they
 * mean for prefixhit_block_index_create, with the same bounds, except that initial_capacity 0 is
 * the device default (2^20 slots). A failed device allocation is PREFIXHIT_STATUS_CUDA_ERROR. */
PREFIXHIT_API prefixhit_status prefixhit_device_block_index_create(
    const prefixhit_block_index_options* options, prefixhit_device_block_index** out);
/* Frees the index; no mirror into it and no call on it may still run. */
PREFIXHIT_API void prefixhit_device_block_index_destroy(prefixhit_device_block_index* index);
/* The prefixhit_block_index_*_width calls on the device index: the same arguments (host arrays),
 * counts, checks and statuses; a failed call applies nothing. */
PREFIXHIT_API prefixhit_status prefixhit_device_block_index_insert_width(
    prefixhit_device_block_index* index, uint32_t ns, int32_t group_id, size_t digest_size,
    const uint8_t* keys, size_t num_keys, size_t* inserted);
PREFIXHIT_API prefixhit_status prefixhit_device_block_index_erase_width(
    prefixhit_device_block_index* index, uint32_t ns, int32_t group_id, size_t digest_size,
    const uint8_t* keys, size_t num_keys, size_t* erased);
PREFIXHIT_API prefixhit_status prefixhit_device_block_index_contains_width(
    const prefixhit_device_block_index* index, uint32_t ns, int32_t group_id, size_t digest_size,
    const uint8_t* keys, size_t num_keys, uint8_t* present);
/* Live keys (all namespaces). */
PREFIXHIT_API prefixhit_status
prefixhit_device_block_index_size(const prefixhit_device_block_index* index, size_t* out);

/* The GPU batch lookup engine of one coordinator: plans once, then serves any number of batches
 * (create it once, not per batch). It copies what it needs: the coordinator may be destroyed
 * first. Thread-safe: concurrent lookups on one engine run one at a time. */
PREFIXHIT_API prefixhit_status prefixhit_gpu_engine_create(const prefixhit_coordinator* coordinator,
                                                           prefixhit_gpu_engine** out);
PREFIXHIT_API void prefixhit_gpu_engine_destroy(prefixhit_gpu_engine* engine);

/* prefixhit_find_longest_cache_hits on the GPU, against a device index under namespace ns
 * (0 .. 2^24 - 1): the engine's coordinator, the same batch arguments (less num_threads),
 * outputs, statuses and messages, and results equal to the CPU call's on a block index holding
 * the same keys. The batch is checked on the host before anything runs on the device. */
PREFIXHIT_API prefixhit_status prefixhit_find_longest_cache_hits_gpu(
    const prefixhit_gpu_engine* engine, const uint8_t* digests, size_t num_digests,
    const int64_t* offsets, const int64_t* max_lengths, const uint8_t* apply_eagle,
    size_t num_requests, const prefixhit_device_block_index* index, uint32_t ns,
    int64_t* hit_lengths, int64_t* num_blocks, int64_t* num_placeholders);

/* prefixhit_mirror_create into a device index (which must outlive the mirror): the same
 * options, threads, statistics and calls (prefixhit_mirror_stop, _get_stats, _wait_for_seq,
 * _destroy, which stops the mirror before it lets go of the index). Its writes hold the index's
 * mutex, so device index calls and GPU lookups may run from any thread meanwhile; each sees the
 * index between two of the mirror's writes. UNAVAILABLE without CUDA, a device or the event
 * mirror (prefixhit_mirror_available()). */
PREFIXHIT_API prefixhit_status
prefixhit_mirror_create_device(const prefixhit_mirror_options* options,
                               prefixhit_device_block_index* index, prefixhit_mirror** out);

/* ---- router mode (issue 12) -------------------------------------------------------------------
 * Which workers hold which keys, and every worker's exact prefix hit for a batch of requests in
 * one pass (docs/router.md). A residency index is thread-safe: concurrent readers and writers,
 * each call atomic; a failed call applies nothing. */
typedef struct prefixhit_residency prefixhit_residency;

typedef struct prefixhit_residency_options {
  int32_t num_workers;     /* in [1, 65536] */
  int32_t num_tiers;       /* in [1, 4]; 0 means 1 */
  size_t initial_capacity; /* key slots reserved up front; 0 for the default */
  uint64_t seed;           /* 0: a random hash seed */
} prefixhit_residency_options;

/* All tiers count as held (the tier_mask of prefixhit_score_workers). */
#define PREFIXHIT_ALL_TIERS 0xFFFFFFFFu

PREFIXHIT_API prefixhit_status
prefixhit_residency_create(const prefixhit_residency_options* options, prefixhit_residency** out);
PREFIXHIT_API void prefixhit_residency_destroy(prefixhit_residency* residency);
/* Worker `worker` now holds these keys (num_keys * digest_size bytes; digest_size 8, 16 or 32) of
 * one group on `tier`. *added (may be NULL): how many (key, worker-tier) pairs were new. */
PREFIXHIT_API prefixhit_status prefixhit_residency_insert(prefixhit_residency* residency,
                                                          uint32_t worker, uint32_t ns,
                                                          int32_t group_id, const uint8_t* keys,
                                                          size_t num_keys, size_t digest_size,
                                                          int32_t tier, size_t* added);
/* The worker no longer holds these keys on `tier`; absent ones are ignored. *removed may be NULL.
 */
PREFIXHIT_API prefixhit_status prefixhit_residency_erase(prefixhit_residency* residency,
                                                         uint32_t worker, uint32_t ns,
                                                         int32_t group_id, const uint8_t* keys,
                                                         size_t num_keys, size_t digest_size,
                                                         int32_t tier, size_t* removed);
/* AllBlocksCleared (or the worker left): drops every key of the worker on every tier, in time
 * proportional to the distinct worker sets. */
PREFIXHIT_API prefixhit_status prefixhit_residency_clear_worker(prefixhit_residency* residency,
                                                                uint32_t worker);
/* *out = 1 when the worker holds the key (digest_size bytes) on a tier of tier_mask, else 0. */
PREFIXHIT_API prefixhit_status prefixhit_residency_contains(const prefixhit_residency* residency,
                                                            uint32_t worker, uint32_t ns,
                                                            int32_t group_id, const uint8_t* key,
                                                            size_t digest_size, uint32_t tier_mask,
                                                            int* out);
/* Live keys (held by at least one worker). */
PREFIXHIT_API prefixhit_status prefixhit_residency_size(const prefixhit_residency* residency,
                                                        size_t* out);
PREFIXHIT_API prefixhit_status prefixhit_residency_num_workers(const prefixhit_residency* residency,
                                                               int32_t* out);

/* Every worker's result for every request, as prefixhit_find_longest_cache_hits would give with
 * worker w's own keys as the store. The batch arguments are those of
 * prefixhit_find_longest_cache_hits; ns: the namespace looked up; tier_mask: tiers that count as
 * held (bit t: tier t; PREFIXHIT_ALL_TIERS). Outputs (caller-allocated, row-major; W = the
 * residency's num_workers, G = the coordinator's num_groups): hit_lengths [num_requests * W],
 * num_blocks and num_placeholders [num_requests * W * G] (both may be NULL when not wanted). On
 * error nothing useful is in the outputs and the message names the first failing request. */
PREFIXHIT_API prefixhit_status prefixhit_score_workers(
    const prefixhit_coordinator* coordinator, const prefixhit_residency* residency,
    const uint8_t* digests, size_t num_digests, const int64_t* offsets, const int64_t* max_lengths,
    const uint8_t* apply_eagle, size_t num_requests, uint32_t ns, uint32_t tier_mask,
    int num_threads, int64_t* hit_lengths, int64_t* num_blocks, int64_t* num_placeholders);

/* 1 when prefixhit_score_workers_gpu can run: a CUDA build (or the CUDA emulator) with a device;
 * else 0. */
PREFIXHIT_API int prefixhit_router_gpu_available(void);

/* prefixhit_score_workers on the GPU (docs/router.md, "GPU path"): the same arguments (less
 * num_threads), outputs, statuses and messages, and results equal to the CPU call's. Returns
 * PREFIXHIT_STATUS_UNAVAILABLE (after the handle, buffer and batch checks) in a build without
 * CUDA or without a device. Each call builds its GPU engine and copies the batch's worker-set table
 * to the device: it pays off for large batches, not single requests. */
PREFIXHIT_API prefixhit_status prefixhit_score_workers_gpu(
    const prefixhit_coordinator* coordinator, const prefixhit_residency* residency,
    const uint8_t* digests, size_t num_digests, const int64_t* offsets, const int64_t* max_lengths,
    const uint8_t* apply_eagle, size_t num_requests, uint32_t ns, uint32_t tier_mask,
    int64_t* hit_lengths, int64_t* num_blocks, int64_t* num_placeholders);

/* The k best workers per request from hit_lengths [num_requests * num_workers]: out
 * [num_requests * k] (caller-allocated), -1 past the last worker. Longest hit first, then lowest
 * load[w] (load: num_workers entries, or NULL), then lowest worker id. */
PREFIXHIT_API prefixhit_status prefixhit_top_k_workers(const int64_t* hit_lengths,
                                                       size_t num_requests, int32_t num_workers,
                                                       int32_t k, const double* load, int32_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PREFIXHIT_PREFIXHIT_H_ */
