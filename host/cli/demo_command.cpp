#include "host/cli/commands.hpp"
namespace prefixhit::cli {
void add_demo_command(CLI::App&) {}
}
