// Shared by the C ABI's translation units: every entry point runs its body through
// guarded_call, which turns exceptions into statuses and sets prefixhit_last_error().
#pragma once

#include <functional>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/prefixhit.h"

namespace prefixhit::capi {
prefixhit_status guarded_call(const std::function<void()>& body) noexcept;
/// The index behind a handle; throws InvalidArgument for NULL.
BlockIndex& block_index_of(prefixhit_block_index* handle);
/// The coordinator behind a handle; throws InvalidArgument for NULL.
const Coordinator& coordinator_of(const prefixhit_coordinator* handle);
}  // namespace prefixhit::capi
