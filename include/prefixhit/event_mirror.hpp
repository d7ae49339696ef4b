// EventMirror: a resident index kept true to a store from its KV-event streams (ZeroMQ PUB +
// msgpack), so that lookups need no existence RPC. docs/mirror.md describes the wire formats,
// the gap/replay rules and the statistics.
//
// Built only when ZeroMQ (libzmq + cppzmq) and msgpack-cxx are found; mirror_available() says
// whether this build has it, and every constructor throws Unavailable where it does not.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/store_keys.hpp"
#include "prefixhit/types.hpp"

// Identical to the CUDA runtime's own declaration (cudaStream_t is CUstream_st*).
struct CUstream_st;

namespace prefixhit {

class DeviceBlockIndex;  // device_block_index.hpp

/// Whether this build has the event mirror (ZeroMQ and msgpack-cxx were found).
bool mirror_available() noexcept;

/// The event stream's wire format.
enum class EventFormat : std::uint8_t {
  /// vLLM KV events: [topic, seq(8 B BE), msgpack [ts, [BlockStored|BlockRemoved|
  /// AllBlocksCleared...], dp_rank]], tagged maps or positional arrays, hashes as bytes or ints.
  vllm,
  /// Mooncake master events: [topic, seq, msgpack [ts_ms, [{event_type, object_key, medium,
  /// ...}...], dp_rank]], with vLLM store keys in object_key.
  mooncake,
};
const char* to_string(EventFormat format) noexcept;
/// "vllm" or "mooncake"; throws InvalidArgument otherwise.
EventFormat parse_event_format(const std::string& name);

/// A block key as an event names it: up to 32 digest bytes and the digest's width in bytes
/// (8 for an integer hash: its big-endian bytes; else the length of the bytes or hex digest).
struct EventKey {
  std::array<std::uint8_t, 32> bytes{};  ///< the digest; bytes past digest_size are zero
  std::uint8_t digest_size = 32;         ///< 8, 16 or 32
  std::int32_t group_id = 0;
};

/// Where a mirror applies its key changes: the resident index. Each call carries only keys
/// whose presence changed. A throwing call must apply nothing; the mirror then leaves its own
/// state as before (the event is counted as failed).
///
/// A sink that never refuses for capacity (may_refuse() false) gets a message's run of events
/// between clears as one erase and one insert call (the keys present before the run and not
/// after it, then the reverse), so that a lookup between them sees only keys present both
/// before and after; should a call still throw, the run is undone and re-applied event by
/// event. A sink that may refuse gets one call per event, so that exactly the refused events
/// are skipped.
class MirrorSink {
 public:
  virtual ~MirrorSink() = default;
  virtual void insert(Namespace ns, span<const EventKey> keys) = 0;
  virtual void erase(Namespace ns, span<const EventKey> keys) = 0;
  /// Keys the sink holds (all namespaces).
  virtual std::size_t size() const = 0;
  /// Whether insert may throw for a full index (then events are applied one by one).
  virtual bool may_refuse() const { return true; }
};

/// The index digest of an event key: today the 32-byte BlockDigest, zero-padded past
/// digest_size. The one place that maps event keys onto the index's key type.
BlockDigest to_index_digest(const EventKey& key) noexcept;

/// A sink over a CPU BlockIndex (borrowed; it must outlive the sink). The index stays usable
/// for lookups from any thread while the mirror writes (BlockIndex is thread-safe).
class BlockIndexSink final : public MirrorSink {
 public:
  explicit BlockIndexSink(BlockIndex& index);
  ~BlockIndexSink() override;
  BlockIndexSink(const BlockIndexSink&) = delete;
  BlockIndexSink& operator=(const BlockIndexSink&) = delete;
  /// Stages the keys in one pass, then one index call per digest width present; all or
  /// nothing across widths.
  void insert(Namespace ns, span<const EventKey> keys) override { apply(true, ns, keys); }
  void erase(Namespace ns, span<const EventKey> keys) override { apply(false, ns, keys); }
  std::size_t size() const override { return index_->size(); }
  /// Only an index with a max_capacity refuses inserts.
  bool may_refuse() const override { return index_->options().max_capacity != 0; }

 private:
  struct Stages;  // reused staging buffers (host/mirror/staging.hpp)
  void apply(bool insert, Namespace ns, span<const EventKey> keys);

  BlockIndex* index_;
  std::unique_ptr<Stages> stages_;
};

/// A sink over a GPU DeviceBlockIndex (borrowed; it must outlive the sink), the mirror's index
/// where a GPU is present. The same batched calls as BlockIndexSink: the keys are staged on the
/// host in one pass, copied into device buffers the sink owns, and applied with the index's
/// synchronous insert/erase on `stream`, one call per digest width, all or nothing.
///
/// A DeviceBlockIndex is not internally synchronised: code that uses the index (its calls, or
/// kernels on its ref()) while a mirror writes must hold lock() meanwhile, and order its own
/// work on the index before releasing it. Throws Unavailable in builds without CUDA; CudaError
/// when device memory for staging cannot be had (nothing applied then).
class DeviceBlockIndexSink final : public MirrorSink {
 public:
  explicit DeviceBlockIndexSink(DeviceBlockIndex& index, CUstream_st* stream = nullptr);
  ~DeviceBlockIndexSink() override;
  DeviceBlockIndexSink(const DeviceBlockIndexSink&) = delete;
  DeviceBlockIndexSink& operator=(const DeviceBlockIndexSink&) = delete;
  void insert(Namespace ns, span<const EventKey> keys) override;
  void erase(Namespace ns, span<const EventKey> keys) override;
  /// The index's size (synchronises the stream).
  std::size_t size() const override;
  /// Only an index with a max_capacity refuses inserts.
  bool may_refuse() const override;
  /// Holds the mirror's writes off the index while the returned lock lives.
  std::unique_lock<std::mutex> lock() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A Mooncake object key parsed back: [{cache_prefix}@]{model}@tp_rank:{t}@pcp{p}@dcp{d}@
/// pp_rank:{r}@group:{g}@{hex digest}.
struct StoreKeyParts {
  std::string cache_prefix;  ///< empty when the key has none
  std::string model;
  RankNamespace rank;
  EventKey key;  ///< digest (16, 32 or 64 hex digits) and group
};
/// Parses an object key with try_parse_store_key (store_keys.hpp); false (and `out`
/// unspecified) when it is not a vLLM store key with a group id below kMaxGroups and a digest of
/// 8, 16 or 32 bytes.
bool parse_store_key_parts(std::string_view object_key, StoreKeyParts& out);

struct EventMirrorOptions {
  EventFormat format = EventFormat::vllm;
  /// PUB endpoints to subscribe to (each its own sequence stream), e.g. "tcp://127.0.0.1:5557".
  std::vector<std::string> endpoints;
  /// Replay (ROUTER) endpoint per endpoint; empty or "" for none (gaps then resync).
  std::vector<std::string> replay_endpoints;
  std::string topic;  ///< subscription prefix ("" = every topic)
  Namespace ns = 0;   ///< index namespace the keys go to
  /// Messages buffered between the receiving thread (which decodes them) and the applying
  /// thread. When full, the receiver waits (counted as backpressure) and ZeroMQ's own bounded
  /// queue absorbs the rest.
  std::size_t queue_capacity = 4096;
  /// Block hashes those buffered messages may hold, decoded (40 bytes each): the receiver also
  /// waits past this many, unless the queue is empty (a larger message goes through alone).
  std::size_t queue_max_keys = std::size_t{1} << 20;
  int replay_timeout_ms = 1000;  ///< wait this long for each replayed message
  /// Mooncake only: the rank namespaces every key must be in to count as present (vLLM's
  /// all-namespaces rule), the same for every group. Empty: the single namespace (0, 0, 0, 0).
  std::vector<RankNamespace> ranks;
  /// Mooncake only: keep keys of this model only ("" = any), and of this cache prefix only
  /// (match_cache_prefix; "" = keys without a prefix).
  std::string model;
  bool match_cache_prefix = false;
  std::string cache_prefix;
};

/// The rank namespaces of a tp x pcp x dcp x pp deployment (every combination).
std::vector<RankNamespace> rank_namespaces(int tp_size, int pcp_size = 1, int dcp_size = 1,
                                           int pp_size = 1);

/// What a mirror has done. Counters only grow, except keys / index_keys / lag / queue_depth.
struct EventMirrorStats {
  std::uint64_t messages = 0;            ///< messages applied (live and replayed)
  std::uint64_t events_stored = 0;       ///< BlockStored events applied
  std::uint64_t events_removed = 0;      ///< BlockRemoved events applied
  std::uint64_t events_cleared = 0;      ///< AllBlocksCleared / RemoveAll events applied
  std::uint64_t hashes_stored = 0;       ///< block hashes in applied stored events
  std::uint64_t hashes_removed = 0;      ///< block hashes in applied removed events
  std::uint64_t malformed_messages = 0;  ///< messages skipped whole (bad frames or payload)
  std::uint64_t malformed_events = 0;    ///< events skipped (bad fields) inside good messages
  std::uint64_t failed_events = 0;       ///< events the index refused (capacity), skipped
  std::uint64_t foreign_keys = 0;        ///< Mooncake keys of another model/prefix/rank, ignored
  std::uint64_t gaps = 0;                ///< sequence gaps detected (incl. a late join)
  std::uint64_t missed_messages = 0;     ///< messages in gaps that no replay recovered
  std::uint64_t replays = 0;             ///< replay requests made
  std::uint64_t replayed_messages = 0;   ///< messages recovered by replay
  std::uint64_t resyncs = 0;             ///< clears after a gap replay could not fill
  std::uint64_t duplicates = 0;          ///< messages at or below the last sequence, skipped
  std::uint64_t backpressure = 0;        ///< times the receiver found the queue full and waited
  std::uint64_t queue_depth = 0;         ///< messages waiting now
  bool has_seq = false;                  ///< a message has been applied (last_seq is valid)
  std::uint64_t last_seq = 0;            ///< last applied sequence (the highest over endpoints)
  double lag_ms = 0;                     ///< apply time minus the event batch's timestamp, last
  double max_lag_ms = 0;
  std::uint64_t keys = 0;        ///< keys present per the mirror (counted media/ranks)
  std::uint64_t index_keys = 0;  ///< the sink's size()
  std::string last_error;        ///< why the last message/event was skipped, or ""
};

/// Decodes and applies event payloads to a sink, synchronously (no sockets, no threads): the
/// core of EventMirror, usable on its own by tests, benchmarks and fuzzers. Not thread-safe.
class EventApplier {
 public:
  EventApplier(MirrorSink& sink, const EventMirrorOptions& options);
  ~EventApplier();
  EventApplier(const EventApplier&) = delete;
  EventApplier& operator=(const EventApplier&) = delete;

  /// Applies one msgpack payload ([ts, events, dp_rank]); every well-formed event in order.
  /// Never throws for bad input: a bad payload or event is counted in stats and skipped.
  void apply_payload(const std::uint8_t* data, std::size_t size);
  /// Erases every key this mirror put in the index (AllBlocksCleared, or a resync).
  void clear();
  /// Counters of this applier (sequence fields are the caller's).
  const EventMirrorStats& stats() const noexcept;
  EventMirrorStats& mutable_stats() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Subscribes to options.endpoints and applies every event, in sequence order per endpoint, to
/// `sink` on its own threads (one receives and decodes, one applies). Sequence gaps (including a
/// late join) are filled from the endpoint's replay socket; when that is impossible the mirror
/// erases its keys, resyncs from the live stream and counts a resync. Bad messages and events
/// are counted and skipped, never fatal. Lookups on the sink's index may run concurrently.
class EventMirror {
 public:
  /// Connects and starts; throws InvalidArgument for bad options (no endpoint, bad endpoint),
  /// Unavailable in builds without ZeroMQ/msgpack. `sink` must outlive the mirror.
  EventMirror(MirrorSink& sink, EventMirrorOptions options);
  ~EventMirror();  ///< stop()
  EventMirror(const EventMirror&) = delete;
  EventMirror& operator=(const EventMirror&) = delete;

  /// Stops both threads and closes the sockets; idempotent. Events not yet applied are dropped.
  void stop();
  bool running() const noexcept;
  /// A consistent snapshot of the counters (safe from any thread).
  EventMirrorStats stats() const;
  /// Waits until a message with sequence >= seq has been applied (on any endpoint); false on
  /// timeout. For tests and for measuring staleness.
  bool wait_for_seq(std::uint64_t seq, double timeout_s) const;
  const EventMirrorOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixhit
