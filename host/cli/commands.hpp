// Subcommands of the prefixhit CLI; each file registers one.
#pragma once

#include <CLI/CLI.hpp>

namespace prefixhit::cli {

void add_conformance_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_index_command(CLI::App& app);
void add_route_bench_command(CLI::App& app);

}  // namespace prefixhit::cli
