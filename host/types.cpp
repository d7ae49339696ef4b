// Value types: the kinds' names, result expansion into masks, and typed errors.
#include <string>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

const char* to_string(GroupKind kind) noexcept {
  switch (kind) {
    case GroupKind::full_attention:
      return "full_attention";
    case GroupKind::mla_attention:
      return "mla_attention";
    case GroupKind::sliding_window:
      return "sliding_window";
    case GroupKind::sliding_window_mla:
      return "sliding_window_mla";
    case GroupKind::chunked_local:
      return "chunked_local";
    case GroupKind::mamba:
      return "mamba";
    case GroupKind::circular_buffer:
      return "circular_buffer";
  }
  return "unknown";
}

const char* to_string(Semantics semantics) noexcept {
  switch (semantics) {
    case Semantics::pr49069:
      return "pr49069";
    case Semantics::vllm_0_33:
      return "vllm-0.33";
  }
  return "unknown";
}

Semantics parse_semantics(std::string_view name) {
  if (name == "pr49069") {
    return Semantics::pr49069;
  }
  if (name == "vllm-0.33" || name == "vllm_0_33") {
    return Semantics::vllm_0_33;
  }
  throw InvalidArgument("unknown semantics '" + std::string(name) +
                        "' (expected pr49069 or vllm-0.33)");
}

const char* to_string(MambaCacheMode mode) noexcept {
  switch (mode) {
    case MambaCacheMode::none:
      return "none";
    case MambaCacheMode::align:
      return "align";
    case MambaCacheMode::all:
      return "all";
  }
  return "unknown";
}

GroupKind parse_group_kind(std::string_view name) {
  for (GroupKind kind : {GroupKind::full_attention, GroupKind::mla_attention,
                         GroupKind::sliding_window, GroupKind::sliding_window_mla,
                         GroupKind::chunked_local, GroupKind::mamba, GroupKind::circular_buffer}) {
    if (name == to_string(kind)) {
      return kind;
    }
  }
  throw InvalidArgument("unknown group kind '" + std::string(name) +
                        "' (expected full_attention, mla_attention, sliding_window, "
                        "sliding_window_mla, chunked_local, mamba or circular_buffer)");
}

MambaCacheMode parse_mamba_cache_mode(std::string_view name) {
  for (MambaCacheMode mode : {MambaCacheMode::none, MambaCacheMode::align, MambaCacheMode::all}) {
    if (name == to_string(mode)) {
      return mode;
    }
  }
  throw InvalidArgument("unknown mamba_cache_mode '" + std::string(name) +
                        "' (expected none, align or all)");
}

std::vector<bool> LookupResult::mask(int group_id) const {
  if (group_id < 0 || static_cast<std::size_t>(group_id) >= groups.size()) {
    throw InvalidArgument("group id " + std::to_string(group_id) + " is not in this result (" +
                          std::to_string(groups.size()) + " groups)");
  }
  const GroupHit& hit = groups[static_cast<std::size_t>(group_id)];
  std::vector<bool> out(static_cast<std::size_t>(hit.num_blocks), true);
  for (std::int64_t i = 0; i < hit.num_placeholders; ++i) {
    out[static_cast<std::size_t>(i)] = false;
  }
  return out;
}

std::vector<std::vector<bool>> LookupResult::masks() const {
  std::vector<std::vector<bool>> out;
  out.reserve(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out.push_back(mask(static_cast<int>(g)));
  }
  return out;
}

bool ChunkMask::contains(std::int64_t chunk) const noexcept {
  if (chunk < first_chunk || chunk >= end_chunk) {
    return false;
  }
  return !keep.has_value() || (*keep)[static_cast<std::size_t>(chunk - first_chunk)] != 0;
}

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::invalid_config:
      throw InvalidConfig(message);
    case ErrorKind::unaligned_length:
      throw UnalignedLength(message);
    case ErrorKind::unsupported_eagle_chunked_local:
      throw UnsupportedEagleChunkedLocal(message);
    case ErrorKind::unsupported_alignment_chunked_local:
      throw UnsupportedAlignmentChunkedLocal(message);
    case ErrorKind::unsupported_alignment_sliding_window:
      throw UnsupportedAlignmentSlidingWindow(message);
    case ErrorKind::invalid_argument:
      throw InvalidArgument(message);
    case ErrorKind::capacity_exceeded:
      throw CapacityExceeded(message);
    case ErrorKind::io_error:
      throw IoError(message);
    case ErrorKind::format_error:
      throw FormatError(message);
    case ErrorKind::cuda_error:
      throw CudaError(message);
    case ErrorKind::unavailable:
      throw Unavailable(message);
    case ErrorKind::ok:
      break;
  }
  throw Error(kind, message);
}

}  // namespace prefixhit
