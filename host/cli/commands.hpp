// Subcommands of the prefixhit CLI; each file registers one.
#pragma once

#include <cmath>
#include <string>

#include <CLI/CLI.hpp>

namespace prefixhit::cli {

/// For unsigned options: CLI11 would wrap "-1" around to 2^64-1 (a seed, a limit, a count).
inline const CLI::Validator kNonNegative(
    [](std::string& input) -> std::string {
      const std::size_t first = input.find_first_not_of(" \t");
      if (first != std::string::npos && input[first] == '-') {
        return "must not be negative, got " + input;
      }
      return {};
    },
    "NONNEGATIVE", "NonNegative");

/// For floating options: CLI::Range lets nan through (every comparison with it is false).
inline const CLI::Validator kFinite(
    [](std::string& input) -> std::string {
      try {
        std::size_t used = 0;
        const double value = std::stod(input, &used);
        if (used != input.size() || !std::isfinite(value)) {
          return "must be a finite number, got " + input;
        }
      } catch (const std::exception&) {
        return "must be a finite number, got " + input;
      }
      return {};
    },
    "FINITE", "Finite");

void add_conformance_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_index_command(CLI::App& app);
void add_route_bench_command(CLI::App& app);
void add_mirror_command(CLI::App& app);

}  // namespace prefixhit::cli
