// `prefixhit conformance`: runs every case of the given vector files or folders.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "host/cli/commands.hpp"
#include "host/vectors/conformance.hpp"

namespace prefixhit::cli {

namespace {

struct ConformanceOptions {
  std::string backend = "cpu";
  std::vector<std::string> paths;
  std::size_t max_failures_shown = 20;
};

int run_conformance(const ConformanceOptions& options) {
  std::vector<std::string> paths = options.paths;
  if (paths.empty()) {
    paths.push_back(conformance::default_vectors_dir());
  }
  const std::vector<std::string> files = conformance::collect_vector_files(paths);
  std::unique_ptr<conformance::Backend> backend = conformance::make_backend(options.backend);
  std::size_t passed = 0;
  std::size_t failed = 0;
  for (const std::string& file : files) {
    const conformance::FileResult result = conformance::run_file(file, *backend);
    std::size_t shown = 0;
    for (const conformance::CaseResult& c : result.cases) {
      if (!c.passed && shown++ < options.max_failures_shown) {
        std::cout << "  FAIL " << c.name << ": " << c.detail << "\n";
      }
    }
    if (shown > options.max_failures_shown) {
      std::cout << "  ... " << (shown - options.max_failures_shown) << " more failures\n";
    }
    std::cout << result.family << " (" << file << "): " << result.passed() << "/"
              << result.cases.size() << " passed on " << backend->name() << "\n";
    passed += result.passed();
    failed += result.failed();
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace

void add_conformance_command(CLI::App& app) {
  auto options = std::make_shared<ConformanceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "conformance",
      "Run conformance vectors (files or folders of *.json) and compare bit for bit");
  cmd->add_option("--backend", options->backend, "Where lookups run: cpu or gpu")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  cmd->add_option("--max-failures", options->max_failures_shown, "Failing cases printed per file")
      ->check(kNonNegative)
      ->capture_default_str();
  cmd->add_option("paths", options->paths,
                  "Vector files or folders (default: $PREFIXHIT_VECTORS or the configured folder)");
  cmd->callback([options] {
    const int rc = run_conformance(*options);
    if (rc != 0) {
      throw CLI::RuntimeError(rc);
    }
  });
}

}  // namespace prefixhit::cli
