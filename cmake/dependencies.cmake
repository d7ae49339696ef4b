# Header-only and test dependencies. Debian packages first; else the carried fallback folder
# (PREFIXHIT_THIRD_PARTY_DIR, filled by scripts/prepare-carry.sh for the GPU machine).
set(_ph_tp "${PREFIXHIT_THIRD_PARTY_DIR}")

find_package(nlohmann_json 3.10 QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json AND EXISTS "${_ph_tp}/include/nlohmann/json.hpp")
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE "${_ph_tp}/include")
endif()

find_package(CLI11 QUIET)
if(NOT TARGET CLI11::CLI11 AND EXISTS "${_ph_tp}/include/CLI/CLI.hpp")
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE "${_ph_tp}/include")
endif()

if(PREFIXHIT_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT TARGET GTest::gtest_main AND EXISTS "${_ph_tp}/googletest/CMakeLists.txt")
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory("${_ph_tp}/googletest" "${PROJECT_BINARY_DIR}/_googletest" EXCLUDE_FROM_ALL)
    if(NOT TARGET GTest::gtest_main)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
    endif()
  endif()
  if(NOT TARGET GTest::gtest_main)
    message(WARNING "prefixhit: GoogleTest not found; tests are not built")
    set(PREFIXHIT_BUILD_TESTS OFF)
  endif()
endif()

if(PREFIXHIT_BUILD_BENCHMARKS)
  find_package(benchmark QUIET)
  # The GPU machine has no Google Benchmark: scripts/prepare-carry.sh brings Debian's build of it.
  if(NOT TARGET benchmark::benchmark AND EXISTS "${_ph_tp}/benchmark/lib/libbenchmark.so")
    add_library(benchmark::benchmark SHARED IMPORTED)
    set_target_properties(benchmark::benchmark PROPERTIES
      IMPORTED_LOCATION "${_ph_tp}/benchmark/lib/libbenchmark.so"
      INTERFACE_INCLUDE_DIRECTORIES "${_ph_tp}/benchmark/include")
    add_library(benchmark::benchmark_main STATIC IMPORTED)
    set_target_properties(benchmark::benchmark_main PROPERTIES
      IMPORTED_LOCATION "${_ph_tp}/benchmark/lib/libbenchmark_main.a"
      INTERFACE_LINK_LIBRARIES benchmark::benchmark)
  endif()
  if(NOT TARGET benchmark::benchmark)
    message(STATUS "prefixhit: Google Benchmark not found; use `prefixhit bench` instead")
    set(PREFIXHIT_BUILD_BENCHMARKS OFF)
  endif()
endif()

if((PREFIXHIT_BUILD_CLI OR PREFIXHIT_BUILD_TESTS) AND NOT TARGET nlohmann_json::nlohmann_json)
  message(FATAL_ERROR "prefixhit: nlohmann-json not found (apt-get install nlohmann-json3-dev)")
endif()
if(PREFIXHIT_BUILD_CLI AND NOT TARGET CLI11::CLI11)
  message(FATAL_ERROR "prefixhit: CLI11 not found (apt-get install libcli11-dev)")
endif()
