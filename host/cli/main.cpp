// prefixhit: conformance runner, benchmarks and the demo workload.
#include <exception>
#include <iostream>

#include "host/cli/commands.hpp"
#include "prefixhit/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"prefixhit: batched prefix-hit lookups for LLM serving (CPU and CUDA)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "prefixhit 0.1.0");
  prefixhit::cli::add_conformance_command(app);
  prefixhit::cli::add_bench_command(app);
  prefixhit::cli::add_demo_command(app);
  prefixhit::cli::add_index_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const prefixhit::Error& e) {
    std::cerr << "prefixhit: error (" << prefixhit::to_string(e.kind()) << "): " << e.what()
              << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "prefixhit: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
