// The CLI under hostile arguments (issue 13, items 4, 5, 6 and 8), run as a subprocess with a
// 10-second deadline: every case must end in a message and a non-zero exit, never a hang or a
// signal; and a few small runs that must succeed and say what they checked (bench, route-bench).
// Skipped when the CLI is not built.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "host/worker_pool.hpp"
#include "tests/cpu/test_support.hpp"

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;  ///< the exit status, or -1 when killed by a signal or the deadline
  int signal = 0;      ///< the signal that ended it, if any
  bool timed_out = false;
  std::string output;  ///< stdout and stderr together
};

std::string cli_path() {
#ifdef PREFIXHIT_CLI_PATH
  return PREFIXHIT_CLI_PATH;
#else
  return {};
#endif
}

/// Runs the CLI with `args`; `file_limit` (bytes) sets RLIMIT_FSIZE with SIGXFSZ at default;
/// `env` adds variables to the child's environment.
Outcome run_cli(const std::vector<std::string>& args, long file_limit = -1,
                const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const std::string out_path =
      (fs::temp_directory_path() / ("prefixhit-cli-" + std::to_string(::getpid()) + ".out"))
          .string();
  const pid_t child = ::fork();
  if (child == 0) {
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::signal(SIGXFSZ, SIG_DFL);
    if (file_limit >= 0) {
      struct rlimit limit {};
      ::getrlimit(RLIMIT_FSIZE, &limit);
      limit.rlim_cur = static_cast<rlim_t>(file_limit);
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    for (const auto& [name, value] : env) {
      ::setenv(name.c_str(), value.c_str(), 1);
    }
    std::vector<std::string> all = {cli_path()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      o.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!o.timed_out) {
    if (WIFEXITED(status)) {
      o.exit_code = WEXITSTATUS(status);
    } else {
      o.signal = WTERMSIG(status);
    }
  }
  std::ifstream in(out_path);
  std::stringstream text;
  text << in.rdbuf();
  o.output = text.str();
  fs::remove(out_path);
  return o;
}

/// The number after the first `"key":` of `output` at or after `from` (-1, and a failure, if
/// there is none): a field of the bench's JSON lines.
double json_number_after(const std::string& output, const std::string& key, std::size_t from) {
  const std::size_t pos = output.find("\"" + key + "\":", from);
  EXPECT_NE(pos, std::string::npos) << key << " in " << output;
  return pos == std::string::npos ? -1.0
                                  : std::strtod(output.c_str() + pos + key.size() + 3, nullptr);
}

/// Expects a clean refusal: no hang, no signal, a non-zero exit, a message with `needle`.
void expect_refused(const std::vector<std::string>& args, const std::string& needle,
                    long file_limit = -1) {
  std::string line;
  for (const std::string& a : args) {
    line += a + " ";
  }
  const Outcome o = run_cli(args, file_limit);
  EXPECT_FALSE(o.timed_out) << line << ": still running after 10 s";
  EXPECT_EQ(o.signal, 0) << line << ": killed by signal " << o.signal << "\n" << o.output;
  EXPECT_GT(o.exit_code, 0) << line << ": accepted\n" << o.output;
  EXPECT_NE(o.output.find(needle), std::string::npos) << line << ": no \"" << needle << "\" in:\n"
                                                      << o.output;
}

class CliHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cli_path().empty() || !fs::exists(cli_path())) {
      GTEST_SKIP() << "the prefixhit CLI is not built";
    }
    std::string pattern = (fs::temp_directory_path() / "prefixhit-cli-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) {
      fs::remove_all(dir_, ec);
    }
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(CliHostile, IndexCommandsRefuseAFifoInsteadOfBlocking) {
  const std::string fifo = file("index.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused({"index", "stats", fifo}, "FIFO");
  expect_refused({"index", "load", fifo}, "FIFO");
  expect_refused({"index", "save", "--synthetic", "2", fifo}, "FIFO");
}

TEST_F(CliHostile, NegativeAndNonFiniteNumbersAreRejected) {
  const std::string index = file("small.pfx");
  const Outcome saved = run_cli({"index", "save", "--synthetic", "2", index});
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  expect_refused({"index", "load", "--max-capacity", "-1", index}, "negative");  // hung before
  expect_refused({"index", "load", "--max-capacity", "9223372036854775808", index}, "max_capacity");
  expect_refused({"index", "save", "--synthetic", "2", "--seed", "-1", index}, "negative");
  expect_refused({"demo", "--seed", "-1"}, "negative");
  expect_refused({"bench", "--min-time", "nan"}, "finite");
  expect_refused({"bench", "--min-time", "inf"}, "finite");
  expect_refused({"conformance", "--max-failures", "-1"}, "negative");
}

TEST_F(CliHostile, AbsurdBenchSizesGetAMessageNotBadAlloc) {
  expect_refused(
      {"bench", "--workload", "dsv4-flash", "--requests", "1048576", "--tokens", "67108864"},
      "--requests");
}

TEST_F(CliHostile, BenchRefusesAnUnknownHashPageSize) {
  expect_refused({"bench", "--hash-pages", "1g"}, "--hash-pages");
  expect_refused({"bench", "--hashes", "warm"}, "--hashes");
}

// The CPU-only options are refused with the GPU backend, not ignored (before any device is
// looked for, so the message is the same with or without a GPU).
TEST_F(CliHostile, BenchRefusesCpuOnlyOptionsWithTheGpuBackend) {
  expect_refused({"bench", "--backend", "gpu", "--hashes", "hot"}, "--hashes");
  expect_refused({"bench", "--backend", "gpu", "--hash-pages", "2m"}, "--hash-pages");
  expect_refused({"bench", "--backend", "gpu", "--batch", "4"}, "--batch");
  expect_refused({"bench", "--backend", "gpu", "--worker-spin-us", "0"}, "--worker-spin-us");
}

// The workers' spin the bench ran with is stated: the pool's own by default, else the option's
// (random here), which must lie within 0 to 1 s.
TEST_F(CliHostile, BenchStatesTheWorkerSpinItRanWith) {
  std::mt19937_64 rng(std::random_device{}());
  const int spin = static_cast<int>(rng() % 500);
  for (const bool given : {false, true}) {
    std::vector<std::string> args = {"bench", "--workload", "fa-3swa", "--requests",
                                     "2",     "--tokens",   "2048",    "--min-time",
                                     "0.001", "--json"};
    if (given) {
      args.insert(args.end(), {"--worker-spin-us", std::to_string(spin)});
    }
    const Outcome o = run_cli(args);
    ASSERT_EQ(o.exit_code, 0) << o.output;
    const std::size_t limit = o.output.rfind('{', o.output.find("\"op\":\"memory_limit\""));
    ASSERT_NE(limit, std::string::npos) << o.output;
    EXPECT_EQ(json_number_after(o.output, "worker_spin_us", limit),
              given ? spin : prefixhit::detail::pool_idle_spin().count())
        << o.output;
  }
  expect_refused({"bench", "--worker-spin-us", "-1"}, "--worker-spin-us");
  expect_refused({"bench", "--worker-spin-us", "1000001"}, "--worker-spin-us");
  // From the environment: the process's spin, and a bad value is an error that names it.
  const std::vector<std::string> small = {"bench", "--workload", "fa-3swa", "--requests",
                                          "2",     "--tokens",   "2048",    "--min-time",
                                          "0.001", "--json"};
  const Outcome from_env = run_cli(small, -1, {{"PREFIXHIT_WORKER_SPIN_US", std::to_string(spin)}});
  ASSERT_EQ(from_env.exit_code, 0) << from_env.output;
  const std::size_t env_limit =
      from_env.output.rfind('{', from_env.output.find("\"op\":\"memory_limit\""));
  ASSERT_NE(env_limit, std::string::npos) << from_env.output;
  EXPECT_EQ(json_number_after(from_env.output, "worker_spin_us", env_limit), spin)
      << from_env.output;
  const Outcome bad = run_cli(small, -1, {{"PREFIXHIT_WORKER_SPIN_US", "fast"}});
  EXPECT_EQ(bad.signal, 0) << bad.output;
  EXPECT_GT(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("PREFIXHIT_WORKER_SPIN_US=\"fast\""), std::string::npos) << bad.output;
}

// Not hostile: a small bench run says what it measured (issue 14): the pages its hashes lie on,
// the in-run limit with a hit's lines, and each lookup row beside them.
TEST_F(CliHostile, BenchJsonStatesItsStoreAndLimit) {
  const Outcome o = run_cli({"bench", "--workload", "dsv4-flash", "--requests", "2", "--tokens",
                             "4096", "--min-time", "0.001", "--hash-pages", "2m", "--json"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("\"hash_pages\":\"2m\""), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("\"hashes\":\"cold\""), std::string::npos) << o.output;
  const std::string field = "\"hit_lines_ns_per_key\":";
  const std::size_t at = o.output.find(field);
  ASSERT_NE(at, std::string::npos) << o.output;
  EXPECT_GT(std::strtod(o.output.c_str() + at + field.size(), nullptr), 0.0) << o.output;
  EXPECT_NE(o.output.find("\"op\":\"lookup_full_store\""), std::string::npos) << o.output;
  // The lookup rows take turns with the limit's reads: the median ratio lies within its spread.
  const auto number_after = [&](const std::string& key, std::size_t from) {
    return json_number_after(o.output, key, from);
  };
  // The limit is the fastest of the three ways of issuing independent reads, each given.
  const std::size_t limit_line = o.output.find("\"op\":\"memory_limit\"");
  ASSERT_NE(limit_line, std::string::npos) << o.output;
  const std::size_t limit_start = o.output.rfind('{', limit_line);
  for (const std::string& base :
       {std::string("independent_read_ns"), std::string("hit_lines_ns_per_key")}) {
    double fastest = std::numeric_limits<double>::infinity();
    for (const char* way : {"_loads", "_prefetched_l1", "_prefetched_l2"}) {
      const double ns = number_after(base + way, limit_start);
      EXPECT_GT(ns, 0.0) << base << way;
      fastest = std::min(fastest, ns);
    }
    EXPECT_EQ(number_after(base, limit_start), fastest) << o.output;
  }
  const std::size_t row = o.output.find("\"op\":\"lookup_full_store\"");
  const std::size_t line_start = o.output.rfind('{', row);
  // A cycle's lines: a header and a digest line per key of each of the 2 requests, plus the
  // caller digests' lines (at most one per key: on 2 MiB pages the digests never straddle two).
  const double cycle_keys = 2 * number_after("keys_per_call", line_start);
  const double cycle_bytes = number_after("cycle_line_bytes", limit_start);
  EXPECT_GE(cycle_bytes, cycle_keys * 2 * 64 + 64) << o.output;
  EXPECT_LE(cycle_bytes, cycle_keys * 3 * 64) << o.output;
  EXPECT_GE(number_after("l3_bytes", limit_start), 0.0);
  // Most keys lie in the line their lookup prefetches with the header (BlockIndex::layout()).
  EXPECT_GT(number_after("keys_in_prefetched_line", limit_start), 0.5);
  EXPECT_LE(number_after("keys_in_prefetched_line", limit_start), 1.0);
  // Some keys lie past a full home bucket, fewer than lie in the prefetched line.
  EXPECT_GE(number_after("keys_in_second_bucket", limit_start), 0.0);
  EXPECT_LT(number_after("keys_in_second_bucket", limit_start),
            number_after("keys_in_prefetched_line", limit_start));
  EXPECT_GE(number_after("limit_turns", line_start), 1.0);
  const double x = number_after("x_hit_lines", line_start);
  EXPECT_GT(x, 0.0);
  EXPECT_LE(number_after("x_hit_lines_p10", line_start), x);
  EXPECT_GE(number_after("x_hit_lines_p90", line_start), x);
  EXPECT_GT(number_after("pct_of_independent_reads", line_start), 0.0);
  // The floor is the row's keys per request at the turn's independent-read rate. With one turn
  // (--min-time below one turn), pct = independent ns / CPU ns per key, so the floor times the
  // requests per call is pct / 100 of the call's CPU time, exactly: a batch row (2 requests)
  // that skipped the per-request division would state twice that.
  const std::size_t batch_row = o.output.find("\"op\":\"batch_lookup_full_store\"");
  ASSERT_NE(batch_row, std::string::npos) << o.output;
  for (const std::size_t at_row : {line_start, o.output.rfind('{', batch_row)}) {
    const double floor_us = number_after("one_line_floor_us_per_request", at_row);
    EXPECT_GT(floor_us, 0.0);
    const double expected = number_after("pct_of_independent_reads", at_row) / 100 *
                            number_after("cpu_us", at_row) / number_after("requests", at_row);
    EXPECT_NEAR(floor_us, expected, 1e-6 * expected) << o.output;
  }
  // The two-thread batch whose worker is parked states the speed-up the pool's wake-ups leave:
  // both shares start late by the measured wake costs and end together, so 2 T1 / (T1 + caller
  // + worker), T1 the one-thread batch's median. The back-to-back row, whose worker spins for
  // work instead, states none.
  const double caller = number_after("pool_wake_caller_us", limit_start);
  const double worker = number_after("pool_wake_worker_us", limit_start);
  EXPECT_GT(caller, 0.0);
  EXPECT_GT(worker, 0.0);
  const double one_thread = number_after("p50_us", o.output.rfind('{', batch_row));
  const std::size_t two_row = o.output.find("\"op\":\"batch_lookup_full_store_2threads\"");
  const std::size_t parked_row =
      o.output.find("\"op\":\"batch_lookup_full_store_2threads_parked\"");
  ASSERT_NE(two_row, std::string::npos) << o.output;
  ASSERT_NE(parked_row, std::string::npos) << o.output;
  const std::string back_to_back = o.output.substr(two_row, o.output.find('\n', two_row) - two_row);
  EXPECT_EQ(back_to_back.find("two_thread_ceiling"), std::string::npos) << back_to_back;
  EXPECT_NE(back_to_back.find("\"threads\":2"), std::string::npos) << back_to_back;
  // And one thread whose core halted before each call, beside the one-thread batch.
  const std::size_t halt_row = o.output.find("\"op\":\"batch_lookup_full_store_after_halt\"");
  ASSERT_NE(halt_row, std::string::npos) << o.output;
  const std::string after_halt =
      o.output.substr(halt_row, o.output.find('\n', halt_row) - halt_row);
  EXPECT_NE(after_halt.find("\"threads\":1"), std::string::npos) << after_halt;
  // No CPU time passes in its sleep, so the sleep is not taken off the CPU time as a busy
  // preparation's wall time is: here a call is shorter than the sleep, and that would leave a
  // CPU time below zero.
  EXPECT_GT(number_after("cpu_us", o.output.rfind('{', halt_row)), 0.0);
  // The batch rows take turns with each other, so each has as many turns as the others.
  const double batch_turns = number_after("limit_turns", o.output.rfind('{', batch_row));
  for (const std::size_t other : {two_row, parked_row, halt_row}) {
    EXPECT_EQ(number_after("limit_turns", o.output.rfind('{', other)), batch_turns) << o.output;
  }
  const double ceiling = number_after("two_thread_ceiling", o.output.rfind('{', parked_row));
  EXPECT_NEAR(ceiling, 2 * one_thread / (one_thread + caller + worker), 1e-6 * ceiling);
  EXPECT_GT(ceiling, 0.0);
  EXPECT_LT(ceiling, 2.0);
}

// With hot hashes a cycle reads no caller lines (they are in cache): exactly a header and a
// digest line per key. The rows are timed and set beside the independent-read rate as with cold
// ones, but not beside a pass over a hit's lines, which the warming would not disturb.
TEST_F(CliHostile, BenchWithHotHashesCountsOnlyTheIndexLines) {
  const Outcome o = run_cli({"bench", "--workload", "fa-3swa", "--requests", "3", "--tokens",
                             "8192", "--min-time", "0.001", "--hashes", "hot", "--json"});
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::size_t limit_start = o.output.rfind('{', o.output.find("\"op\":\"memory_limit\""));
  ASSERT_NE(limit_start, std::string::npos) << o.output;
  EXPECT_NE(o.output.find("\"hashes\":\"hot\"", limit_start), std::string::npos) << o.output;
  const auto number_after = [&](const std::string& key, std::size_t from) {
    return json_number_after(o.output, key, from);
  };
  const std::size_t row = o.output.rfind('{', o.output.find("\"op\":\"lookup_full_store\""));
  const double cycle_keys = 3 * number_after("keys_per_call", row);
  EXPECT_GT(cycle_keys, 0.0);
  EXPECT_EQ(number_after("cycle_line_bytes", limit_start), cycle_keys * 2 * 64) << o.output;
  EXPECT_EQ(number_after("hit_lines_ns_per_key", limit_start), 0.0);
  for (const char* op : {"lookup_full_store", "lookup_with_hole", "batch_lookup_full_store"}) {
    const std::size_t at = o.output.rfind('{', o.output.find(std::string("\"op\":\"") + op));
    const std::size_t end = o.output.find('}', at);
    EXPECT_GT(number_after("p50_us", at), 0.0) << op;
    EXPECT_GT(number_after("cpu_us", at), 0.0) << op;
    EXPECT_GT(number_after("pct_of_independent_reads", at), 0.0) << op;
    EXPECT_GT(o.output.find("\"x_hit_lines\"", at), end) << op;
  }
}

TEST_F(CliHostile, AFileSizeLimitIsAnIoErrorNotSigxfsz) {
  // `ulimit -f 64`: before, the save died of SIGXFSZ.
  expect_refused({"index", "save", "--synthetic", "2000", file("big.pfx")}, "io_error", 64 * 1024);
  EXPECT_FALSE(fs::exists(file("big.pfx")));
}

TEST_F(CliHostile, ConformanceRefusesBombsAndEmptyInput) {
  const std::string bomb = file("bomb.json");
  std::ofstream(bomb) << R"({"cases": [)" << std::string(70000, '[');
  expect_refused({"conformance", bomb}, "nested more than");  // segfaulted before
  const std::string empty = file("empty");
  fs::create_directory(empty);
  expect_refused({"conformance", empty}, "no *.json");  // passed before
  const std::string no_cases = file("none.json");
  std::ofstream(no_cases) << R"({"cases": []})";
  expect_refused({"conformance", no_cases}, "no cases");
}

// Not hostile: route-bench checks its one-pass per-worker scores against one lookup per worker
// on every workload shape, says so in each output, and names the option it refuses.
TEST_F(CliHostile, RouteBenchScoresMatchTheNaiveLoopAndRefusesBadSizes) {
  const std::uint64_t seed = prefixhit::testing::test_seed();
  std::cout << "seed " << seed << " (" << prefixhit::testing::seed_note(seed) << ")\n";
  SCOPED_TRACE(prefixhit::testing::seed_note(seed));
  // 24 requests, every 2nd checked: 12 requests of 9 workers.
  const std::vector<std::string> small = {"route-bench",
                                          "--workers",
                                          "9",
                                          "--requests",
                                          "24",
                                          "--min-tokens",
                                          "1024",
                                          "--max-tokens",
                                          "16384",
                                          "--documents",
                                          "3",
                                          "--depth-levels",
                                          "2",
                                          "--evict",
                                          "0.1",
                                          "--naive-every",
                                          "2",
                                          "--seed",
                                          std::to_string(seed)};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = small;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  for (const std::string workload : {"dsv4-flash", "fa-3swa", "fa-mamba-align"}) {
    const Outcome o = run_cli(with({"--workload", workload, "--json", "--gpu-table"}));
    ASSERT_EQ(o.exit_code, 0) << workload << "\n" << o.output;
    EXPECT_NE(o.output.find("\"mismatches\": 0"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("\"requests\": 12"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("\"every_probe\": {"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("\"reached\": {"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("\"8k_2t\": {"), std::string::npos) << o.output;
  }
  const Outcome text = run_cli(with({}));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("0 mismatches in 108 worker results"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("top-4: "), std::string::npos) << text.output;
  const Outcome profile = run_cli(with({"--only-8k", "1"}));
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_EQ(profile.output.rfind("8K, 1t, 1 rounds: ", 0), 0U) << profile.output;

  expect_refused({"route-bench", "--workers", "0"}, "--workers must be in [1, 65536]");
  expect_refused({"route-bench", "--top-k", "0"}, "--top-k must be positive");
  expect_refused({"route-bench", "--min-tokens", "10", "--max-tokens", "5"}, "--min-tokens");
  expect_refused({"route-bench", "--workload", "nope"}, "unknown workload");
}

}  // namespace
