// `prefixhit index save|load|stats`: index files (include/prefixhit/index_file.hpp) from the
// command line, meaningful without a server: `save --synthetic` builds the index a store would
// hold after serving N prompts (keys chosen by the Coordinator's store_mask), `load` verifies a
// file and loads it into a BlockIndex, `stats` verifies a file and reports what it holds.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "host/cli/bench.hpp"
#include "host/cli/commands.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/index_file.hpp"

namespace prefixhit::cli {

namespace {

struct SaveOptions {
  std::int64_t prompts = 0;
  std::uint32_t namespaces = 1;
  std::string workload = "dsv4-flash";
  std::int64_t tokens = 4096;
  std::uint64_t seed = 1;
  std::string out;
};

struct LoadOptions {
  std::string file;
  std::size_t max_capacity = 0;
};

struct StatsOptions {
  std::string file;
  bool per_group = false;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::map<int, std::uint64_t> keys_per_group_id(const IndexFileStats& stats) {
  std::map<int, std::uint64_t> out;
  for (const auto& [owner, count] : stats.keys_per_group) {
    out[owner.second] += count;
  }
  return out;
}

void print_summary(const IndexFileStats& stats) {
  std::cout << "format version: " << stats.format_version << "\n"
            << "bytes: " << stats.file_bytes << "\n"
            << "keys: " << stats.key_count << "\n"
            << "namespaces: " << stats.keys_per_namespace.size() << "\n";
}

int run_save(const SaveOptions& o) {
  const Workload workload = make_workload(o.workload, o.tokens);
  const Coordinator coordinator(workload.config);
  BlockIndex index;
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t r = 0; r < o.prompts; ++r) {
    // One prompt at a time keeps memory at one hash chain; each prompt has its own chain, so
    // distinct prompts never share keys (a conservative, prefix-free store).
    const std::vector<BlockDigest> hashes = make_request_hashes(
        workload, 1, o.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(r));
    const auto ns = static_cast<Namespace>(static_cast<std::uint64_t>(r) % o.namespaces);
    fill_store(index, ns, coordinator, hashes, workload.tokens, StoreShape::store_mask_roundtrip);
  }
  const double build_ms = ms_since(start);
  const auto save_start = std::chrono::steady_clock::now();
  const IndexFileStats stats = save_index(index, o.out);
  std::cout << "saved " << stats.key_count << " keys to " << o.out << " (" << o.prompts
            << " synthetic prompts of " << workload.tokens << " tokens, workload " << workload.name
            << ", " << o.namespaces << " namespace(s); built in " << build_ms << " ms, saved in "
            << ms_since(save_start) << " ms)\n";
  print_summary(stats);
  return 0;
}

int run_load(const LoadOptions& o) {
  BlockIndexOptions options;
  options.max_capacity = o.max_capacity;
  BlockIndex index(options);
  const auto start = std::chrono::steady_clock::now();
  const IndexFileStats stats = load_index(o.file, index);
  const double ms = ms_since(start);
  if (index.size() != stats.key_count) {
    // The file is verified and canonical (no duplicates), so this would be an index bug.
    throw FormatError("loaded " + std::to_string(index.size()) + " keys but the file holds " +
                      std::to_string(stats.key_count));
  }
  std::cout << "verified and loaded " << index.size() << " keys from " << o.file << " in " << ms
            << " ms (index capacity " << index.capacity() << " slots)\n";
  print_summary(stats);
  return 0;
}

int run_stats(const StatsOptions& o) {
  const IndexFileStats stats = read_index_stats(o.file);
  std::cout << "file: " << o.file << " (verified: magic, version, checksums, record order)\n";
  print_summary(stats);
  std::cout << "keys per namespace:\n";
  for (const auto& [ns, count] : stats.keys_per_namespace) {
    std::cout << "  namespace " << ns << ": " << count << "\n";
  }
  std::cout << "keys per group id (all namespaces):\n";
  for (const auto& [group, count] : keys_per_group_id(stats)) {
    std::cout << "  group " << group << ": " << count << "\n";
  }
  if (o.per_group) {
    std::cout << "keys per (namespace, group id):\n";
    for (const auto& [owner, count] : stats.keys_per_group) {
      std::cout << "  namespace " << owner.first << " group " << owner.second << ": " << count
                << "\n";
    }
  }
  return 0;
}

}  // namespace

void add_index_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "index", "Save, load and inspect BlockIndex files (versioned, checksummed, atomic saves)");
  cmd->require_subcommand(1);

  auto save = std::make_shared<SaveOptions>();
  CLI::App* save_cmd = cmd->add_subcommand(
      "save",
      "Build the index a store would hold after serving N synthetic prompts (keys chosen by the "
      "coordinator's store_mask) and save it atomically to OUT");
  save_cmd
      ->add_option("--synthetic", save->prompts,
                   "Number of synthetic prompts to store (the index's content)")
      ->required()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000000}));
  save_cmd
      ->add_option("--namespaces", save->namespaces,
                   "Spread the prompts round-robin over this many namespaces (tenants)")
      ->check(CLI::Range(std::uint32_t{1}, kMaxNamespace + 1))
      ->capture_default_str();
  save_cmd->add_option("--workload", save->workload, "Model shape whose store_mask picks the keys")
      ->check(CLI::IsMember(workload_names()))
      ->capture_default_str();
  save_cmd->add_option("--tokens", save->tokens, "Tokens per prompt")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
      ->capture_default_str();
  save_cmd->add_option("--seed", save->seed, "Seed of the synthetic digests")
      ->check(kNonNegative)
      ->capture_default_str();
  save_cmd->add_option("OUT", save->out, "Index file to write (replaced atomically)")->required();
  save_cmd->callback([save] { run_save(*save); });

  auto load = std::make_shared<LoadOptions>();
  CLI::App* load_cmd = cmd->add_subcommand(
      "load", "Verify FILE completely and load it into a fresh BlockIndex; print what it holds");
  load_cmd->add_option("FILE", load->file, "Index file")->required();
  load_cmd
      ->add_option("--max-capacity", load->max_capacity,
                   "The index's slot limit (0: unbounded, else 32 to 2^40); a file that does not "
                   "fit is an error")
      ->check(kNonNegative)
      ->capture_default_str();
  load_cmd->callback([load] { run_load(*load); });

  auto stats = std::make_shared<StatsOptions>();
  CLI::App* stats_cmd = cmd->add_subcommand(
      "stats", "Verify FILE and print its key count, version, per-namespace and per-group counts");
  stats_cmd->add_option("FILE", stats->file, "Index file")->required();
  stats_cmd->add_flag("--per-group", stats->per_group, "Also print every (namespace, group) count");
  stats_cmd->callback([stats] { run_stats(*stats); });
}

}  // namespace prefixhit::cli
