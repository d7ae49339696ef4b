#include "host/cli/commands.hpp"
namespace prefixhit::cli {
void add_bench_command(CLI::App&) {}
}
