// `prefixhit mirror --backend`: the GPU backend refuses --save (a device index is not written to
// a file) and, without a usable GPU, says so and exits non-zero; with one it runs. The CLI runs
// in a subprocess.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <string>

#include "prefixhit/gpu.hpp"

#if defined(PREFIXHIT_CLI_PATH)
namespace {

struct CliRun {
  int exit_code = -1;
  std::string output;
};

CliRun run_cli(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(PREFIXHIT_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return r;
  }
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), pipe) != nullptr) {
    r.output += buf.data();
  }
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(MirrorCli, GpuBackendRefusesSave) {
  const CliRun r = run_cli("mirror tcp://127.0.0.1:9 --backend gpu --save /nonexistent/x.idx");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--save needs --backend cpu"), std::string::npos) << r.output;
}

TEST(MirrorCli, GpuBackendWithoutDeviceIsAClearError) {
  const CliRun r = run_cli("mirror tcp://127.0.0.1:9 --backend gpu --duration 0.2 --stats-every 0");
  if (prefixhit::gpu::device_available()) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("gpu index"), std::string::npos) << r.output;
  } else {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("--backend gpu: no usable GPU"), std::string::npos) << r.output;
  }
}

TEST(MirrorCli, UnknownBackendIsRejected) {
  const CliRun r = run_cli("mirror tcp://127.0.0.1:9 --backend tpu");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("backend"), std::string::npos) << r.output;
}

}  // namespace
#endif
