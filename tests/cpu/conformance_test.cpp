// Every public conformance vector on the CPU engine: one ctest case per vector file, and every
// failing case named with its expected and actual values.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "host/vectors/conformance.hpp"

namespace {

using prefixhit::conformance::collect_vector_files;
using prefixhit::conformance::default_vectors_dir;

std::vector<std::string> vector_files() {
  try {
    return collect_vector_files({default_vectors_dir()});
  } catch (const std::exception&) {
    return {"<missing: " + default_vectors_dir() + ">"};
  }
}

class ConformanceFile : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceFile, EveryCasePassesOnCpu) {
  const std::string& path = GetParam();
  ASSERT_TRUE(std::filesystem::exists(path))
      << "conformance vectors not found; set PREFIXHIT_VECTORS or PREFIXHIT_VECTORS_DIR (" << path
      << ")";
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

INSTANTIATE_TEST_SUITE_P(Vectors, ConformanceFile, ::testing::ValuesIn(vector_files()),
                         family_name);

}  // namespace
