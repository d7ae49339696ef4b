// Every conformance vector on the CPU engine: one ctest case per vector file of the pr49069 set,
// the vLLM 0.33 set and the project's extra vectors, and every failing case named with its
// expected and actual values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "host/vectors/conformance.hpp"

#ifndef PREFIXHIT_VECTORS_033_DIR
#define PREFIXHIT_VECTORS_033_DIR "tests/data/conformance-vllm-0.33"
#endif
#ifndef PREFIXHIT_VECTORS_EXTRA_DIR
#define PREFIXHIT_VECTORS_EXTRA_DIR "tests/data/extra"
#endif

namespace {

using prefixhit::conformance::collect_vector_files;
using prefixhit::conformance::default_vectors_dir;

/// A folder from the environment (PREFIXHIT_VECTORS_033 / _EXTRA) or the build's default.
std::string folder(const char* env, const char* fallback) {
  const char* value = std::getenv(env);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::vector<std::string> files_in(const std::string& dir) {
  try {
    return collect_vector_files({dir});
  } catch (const std::exception&) {
    return {"<missing: " + dir + ">"};
  }
}

class ConformanceFile : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceFile, EveryCasePassesOnCpu) {
  const std::string& path = GetParam();
  ASSERT_TRUE(std::filesystem::exists(path))
      << "conformance vectors not found; set PREFIXHIT_VECTORS(_033, _EXTRA) or "
         "PREFIXHIT_VECTORS(_033, _EXTRA)_DIR ("
      << path << ")";
  auto backend = prefixhit::conformance::make_cpu_backend();
  const auto result = prefixhit::conformance::run_file(path, *backend);
  EXPECT_GT(result.cases.size(), 0U);
  for (const auto& c : result.cases) {
    EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  }
}

std::string family_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string stem = std::filesystem::path(info.param).stem().string();
  for (char& ch : stem) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) {
      ch = '_';
    }
  }
  return stem.empty() ? "missing" : stem;
}

INSTANTIATE_TEST_SUITE_P(Vectors, ConformanceFile,
                         ::testing::ValuesIn(files_in(default_vectors_dir())), family_name);
INSTANTIATE_TEST_SUITE_P(VectorsVllm033, ConformanceFile,
                         ::testing::ValuesIn(files_in(folder("PREFIXHIT_VECTORS_033",
                                                             PREFIXHIT_VECTORS_033_DIR))),
                         family_name);
INSTANTIATE_TEST_SUITE_P(VectorsExtra, ConformanceFile,
                         ::testing::ValuesIn(files_in(folder("PREFIXHIT_VECTORS_EXTRA",
                                                             PREFIXHIT_VECTORS_EXTRA_DIR))),
                         family_name);

}  // namespace
