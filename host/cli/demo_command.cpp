// `prefixhit demo`: the main job. Fills an index the way an external KV store looks after a
// serving engine has answered many prompts that share prefixes (system prompts, multi-turn chats,
// long documents), then looks up a batch of new requests and reports the hits and throughput.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "host/cli/bench.hpp"
#include "host/cli/commands.hpp"
#include "host/cli/demo_gpu.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/hashing.hpp"

namespace prefixhit::cli {

namespace {

using Tokens = std::vector<std::int32_t>;

struct DemoOptions {
  std::string workload = "dsv4-flash";
  std::string backend = "auto";
  std::int64_t chats = 48;
  std::int64_t documents = 12;
  std::uint64_t seed = 2026;
  double min_seconds = 1.0;
  std::int64_t rows = 24;
};

struct DemoRequest {
  std::string kind;
  Tokens tokens;
};

class PromptWriter {
 public:
  explicit PromptWriter(std::uint64_t seed) : rng_(seed) {}
  Tokens text(std::int64_t length) {
    std::uniform_int_distribution<std::int32_t> vocab(0, 151935);
    Tokens out(static_cast<std::size_t>(length));
    for (std::int32_t& t : out) {
      t = vocab(rng_);
    }
    return out;
  }
  std::int64_t length(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  std::size_t pick(std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_);
  }

 private:
  std::mt19937_64 rng_;
};

Tokens concat(const Tokens& a, const Tokens& b) {
  Tokens out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

/// Writes what a store holds after serving `prompt`: the store mask's chunks of every group.
std::int64_t store_prompt(BlockIndex& index, const Coordinator& coordinator, const Tokens& prompt) {
  const std::int64_t len = static_cast<std::int64_t>(prompt.size());
  const std::int64_t aligned = coordinator.align_lookup_length(len);
  if (aligned == 0) {
    return 0;
  }
  const std::vector<BlockDigest> hashes = hash_prompt(prompt, coordinator.config().hash_block_size);
  const std::vector<ChunkMask> masks = coordinator.store_mask(aligned, 0, len);
  std::int64_t written = 0;
  for (int g = 0; g < coordinator.num_groups(); ++g) {
    const std::vector<BlockDigest> keys =
        coordinator.chunk_keys(hashes, coordinator.config().groups[g].block_size);
    std::vector<BlockDigest> kept;
    for (std::int64_t c = masks[g].first_chunk; c < masks[g].end_chunk; ++c) {
      if (masks[g].contains(c)) {
        kept.push_back(keys[static_cast<std::size_t>(c)]);
      }
    }
    written += static_cast<std::int64_t>(index.insert(0, g, kept));
  }
  return written;
}

int run_demo(const DemoOptions& options) {
  const Workload workload = make_workload(options.workload);
  const Coordinator coordinator(workload.config);
  const std::int64_t h = workload.config.hash_block_size;
  PromptWriter writer(options.seed);

  // What the store saw: system prompts, multi-turn chats, document Q&A.
  std::vector<Tokens> system_prompts;
  system_prompts.reserve(4);
  for (int i = 0; i < 4; ++i) {
    system_prompts.push_back(writer.text(writer.length(800, 4000)));
  }
  std::vector<Tokens> documents;
  for (std::int64_t i = 0; i < options.documents; ++i) {
    documents.push_back(writer.text(writer.length(8000, 60000)));
  }
  BlockIndex index;
  std::int64_t served = 0;
  std::int64_t served_tokens = 0;
  auto serve = [&](const Tokens& prompt) {
    store_prompt(index, coordinator, prompt);
    ++served;
    served_tokens += static_cast<std::int64_t>(prompt.size());
  };
  std::vector<Tokens> chats;
  for (std::int64_t c = 0; c < options.chats; ++c) {
    Tokens chat = system_prompts[writer.pick(system_prompts.size())];
    const std::int64_t turns = writer.length(1, 6);
    for (std::int64_t t = 0; t < turns; ++t) {
      chat = concat(chat, writer.text(writer.length(50, 1500)));  // user turn
      serve(chat);
      chat = concat(chat, writer.text(writer.length(100, 2500)));  // the model's answer
    }
    chats.push_back(chat);
  }
  for (const Tokens& doc : documents) {
    serve(concat(concat(system_prompts[0], doc), writer.text(writer.length(20, 200))));
  }

  // The waiting queue of a scheduler step.
  std::vector<DemoRequest> requests;
  requests.reserve(chats.size() + documents.size() + 16);
  for (const Tokens& chat : chats) {
    requests.push_back({"chat, next turn", concat(chat, writer.text(writer.length(20, 800)))});
  }
  for (const Tokens& doc : documents) {
    requests.push_back({"document, new question", concat(concat(system_prompts[0], doc),
                                                         writer.text(writer.length(20, 300)))});
  }
  for (int i = 0; i < 8; ++i) {
    requests.push_back(
        {"new chat, known system prompt", concat(system_prompts[writer.pick(system_prompts.size())],
                                                 writer.text(writer.length(30, 600)))});
  }
  for (int i = 0; i < 8; ++i) {
    requests.push_back({"unseen prompt", writer.text(writer.length(200, 6000))});
  }

  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int64_t> max_lengths;
  std::int64_t total_tokens = 0;
  for (const DemoRequest& r : requests) {
    const std::vector<BlockDigest> hashes = hash_prompt(r.tokens, h);
    digests.insert(digests.end(), hashes.begin(), hashes.end());
    offsets.push_back(static_cast<std::int64_t>(digests.size()));
    // At least one token is always computed, as a scheduler does.
    max_lengths.push_back(static_cast<std::int64_t>(r.tokens.size()) - 1);
    total_tokens += static_cast<std::int64_t>(r.tokens.size());
  }
  LookupBatch batch;
  batch.digests = digests;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;

  std::unique_ptr<DemoGpuEngine> gpu;
  std::string backend_note;
  if (options.backend != "cpu") {
    gpu = make_demo_gpu_engine(coordinator, index, 0, &backend_note);
    if (!gpu && options.backend == "gpu") {
      throw Unavailable("--backend gpu: " + backend_note);
    }
  }
  const BlockIndex::View view = index.view(0);
  auto lookup = [&] {
    return gpu ? gpu->find_longest_cache_hits(batch)
               : coordinator.find_longest_cache_hits(batch, view);
  };
  const BatchLookupResult result = lookup();

  std::printf("prefixhit demo: workload %s (%zu KV-cache groups, H=%lld, S=%lld)\n",
              workload.name.c_str(), workload.config.groups.size(), static_cast<long long>(h),
              static_cast<long long>(workload.config.scheduler_block_size));
  std::printf("store: %lld prompts served (%lld tokens), %zu block keys resident\n",
              static_cast<long long>(served), static_cast<long long>(served_tokens), index.size());
  std::printf(
      "backend: %s\n\n",
      gpu ? "gpu"
          : ("cpu" + (backend_note.empty() ? std::string() : " (" + backend_note + ")")).c_str());
  std::printf("%-4s %-30s %8s %8s %6s  loaded blocks per group\n", "req", "kind", "tokens", "hit",
              "hit%");
  std::int64_t hit_tokens = 0;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    hit_tokens += result.hit_lengths[r];
    if (static_cast<std::int64_t>(r) >= options.rows && r + 4 < requests.size()) {
      continue;  // the table shows the first rows and the last few
    }
    const auto tokens = static_cast<long long>(requests[r].tokens.size());
    std::printf("%-4zu %-30s %8lld %8lld %5.1f%% ", r, requests[r].kind.c_str(), tokens,
                static_cast<long long>(result.hit_lengths[r]),
                100.0 * static_cast<double>(result.hit_lengths[r]) / static_cast<double>(tokens));
    for (int g = 0; g < coordinator.num_groups(); ++g) {
      const std::size_t cell =
          r * static_cast<std::size_t>(coordinator.num_groups()) + static_cast<std::size_t>(g);
      std::printf(" g%d:%lld", g,
                  static_cast<long long>(result.num_blocks[cell] - result.num_placeholders[cell]));
    }
    std::printf("\n");
    if (static_cast<std::int64_t>(r) + 1 == options.rows && requests.size() > r + 5) {
      std::printf("...  (%zu more requests)\n", requests.size() - r - 5);
    }
  }
  std::printf("\n%zu requests, %lld prompt tokens, %lld hit tokens (%.1f%%)\n", requests.size(),
              static_cast<long long>(total_tokens), static_cast<long long>(hit_tokens),
              100.0 * static_cast<double>(hit_tokens) / static_cast<double>(total_tokens));

  // Throughput of the whole scheduler step's lookup.
  using clock = std::chrono::steady_clock;
  std::int64_t calls = 0;
  const auto start = clock::now();
  double elapsed = 0;
  do {
    const BatchLookupResult again = lookup();
    if (again.hit_lengths != result.hit_lengths) {
      throw Error(ErrorKind::invalid_argument, "demo: repeated lookups disagree");
    }
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < options.min_seconds);
  const double us_per_batch = elapsed * 1e6 / static_cast<double>(calls);
  std::printf(
      "throughput (%s): %.1f us per batch of %zu requests, %.0f requests/s, %.2f M "
      "prompt tokens/s\n",
      gpu ? "gpu" : "cpu", us_per_batch, requests.size(),
      static_cast<double>(requests.size()) * 1e6 / us_per_batch,
      static_cast<double>(total_tokens) / us_per_batch);
  return 0;
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "The main job: fill a store as serving would, look up a batch of new requests, "
      "print hits per request and throughput (GPU when present, else CPU)");
  cmd->add_option("--workload", options->workload, "Model shape")
      ->check(CLI::IsMember(workload_names()))
      ->capture_default_str();
  cmd->add_option("--backend", options->backend, "auto (GPU when present), cpu or gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))
      ->capture_default_str();
  cmd->add_option("--chats", options->chats, "Multi-turn chats served before the lookup")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100000}))
      ->capture_default_str();
  cmd->add_option("--documents", options->documents, "Long documents served before the lookup")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{10000}))
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Seed of the synthetic prompts")
      ->check(kNonNegative)
      ->capture_default_str();
  cmd->add_option("--min-time", options->min_seconds, "Seconds spent measuring throughput")
      ->check(kFinite & CLI::Range(0.001, 600.0))
      ->capture_default_str();
  cmd->add_option("--rows", options->rows, "Table rows printed before eliding")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000000}))
      ->capture_default_str();
  cmd->callback([options] { run_demo(*options); });
}

}  // namespace prefixhit::cli
