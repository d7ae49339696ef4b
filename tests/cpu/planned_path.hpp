// A test guard over the process-wide threshold from which resident-index lookups take the
// planned path (host/probes.hpp).
#pragma once

#include "host/probes.hpp"

namespace prefixhit::testing {

/// Sends every resident-index lookup of a test through the planned path (small tables
/// otherwise probe window by window), and restores the threshold afterwards.
class PlannedPathForAllTables {
 public:
  PlannedPathForAllTables() { detail::set_planned_lookup_min_bytes(0); }
  ~PlannedPathForAllTables() {
    detail::set_planned_lookup_min_bytes(detail::kPlannedLookupMinBytes);
  }
  PlannedPathForAllTables(const PlannedPathForAllTables&) = delete;
  PlannedPathForAllTables& operator=(const PlannedPathForAllTables&) = delete;
};

}  // namespace prefixhit::testing
