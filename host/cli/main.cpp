// prefixhit: conformance runner, benchmarks, the demo workload and index files.
#include <exception>
#include <iostream>
#include <new>

#include "host/cli/commands.hpp"
#include "prefixhit/errors.hpp"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"prefixhit: batched prefix-hit lookups for LLM serving (CPU and CUDA)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "prefixhit 0.1.0");
  prefixhit::cli::add_conformance_command(app);
  prefixhit::cli::add_bench_command(app);
  prefixhit::cli::add_demo_command(app);
  prefixhit::cli::add_index_command(app);
  prefixhit::cli::add_route_bench_command(app);
  prefixhit::cli::add_mirror_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Every failure is a message and a non-zero exit, never an abort.
  try {
    return run(argc, argv);
  } catch (const prefixhit::Error& e) {
    std::cerr << "prefixhit: error (" << prefixhit::to_string(e.kind()) << "): " << e.what()
              << "\n";
  } catch (const std::bad_alloc&) {
    std::cerr << "prefixhit: error: out of memory (std::bad_alloc): the sizes asked for need "
                 "more memory than this machine allows\n";
  } catch (const std::exception& e) {
    std::cerr << "prefixhit: error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "prefixhit: error: unknown exception\n";
  }
  return 2;
}
