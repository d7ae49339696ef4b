// prefixhit._core: the compiled half of the prefixhit Python package. The package's
// __init__.py re-exports these names next to the pure-Python error classes.
#include <nanobind/stl/string.h>

#include <cstring>
#include <vector>

#include "common.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/hashing.hpp"

namespace prefixhit::py {

void bind_mirror(nb::module_& m);  // mirror.cpp
void bind_store(nb::module_& m);   // store.cpp: Mooncake store keys and remote mode
void bind_router(nb::module_& m);  // router.cpp: residency index and per-worker scoring

void bind_gpu_info(nb::module_& m) {
  m.def(
      "build_info",
      []() {
        nb::dict info;
#if defined(PREFIXHIT_PY_WITH_CUDA)
        info["cuda"] = true;
#else
        info["cuda"] = false;
#endif
        // The GPU batch engine and the device index need a CUDA build and a visible device.
        info["gpu_available"] = prefixhit::gpu::device_available();
        info["device"] = prefixhit::gpu::describe_device();
        info["slot_hash"] = prefixhit::BlockIndex::slot_hash_form();
        return info;
      },
      "What this build and machine offer: 'cuda' (built with nvcc), 'gpu_available' (a CUDA "
      "device can be used: BlockIndex(device='cuda') and device-array batches work), 'device' "
      "(the device, or why there is none) and 'slot_hash' (how the CPU index hashes its keys: "
      "'aes-ni', 'armv8-aes' or 'table').");
}

void bind_hashing(nb::module_& m) {
  m.def(
      "hash_prompt",
      [](nb::handle tokens, std::int64_t hash_block_size, nb::handle root) {
        const IntArray<std::int32_t> ids(tokens, "tokens");
        BlockDigest seed;
        if (!root.is_none()) {
          const Digests r(nb::make_tuple(root), "root", DigestShape::sequence);
          seed = r.data()[0];
        }
        std::vector<BlockDigest> digests;
        {
          nb::gil_scoped_release release;
          digests = hash_prompt(ids.view(), hash_block_size, seed);
        }
        std::vector<std::uint8_t> bytes(digests.size() * BlockDigest::kSize);
        if (!digests.empty()) {
          std::memcpy(bytes.data(), digests.data(), bytes.size());
        }
        return owned_array(std::move(bytes), {digests.size(), BlockDigest::kSize});
      },
      nb::arg("tokens").none(), nb::arg("hash_block_size"), nb::arg("root").none() = nb::none(),
      nb::sig("def hash_prompt(tokens: IntArray, hash_block_size: int, root: bytes | None = None) "
              "-> numpy.ndarray"),
      "prefixhit's own block hashes for a token prompt: uint8 [floor(len(tokens) / "
      "hash_block_size), 32], a SHA-256 chain h[i] = SHA-256(h[i-1] || block i's tokens as "
      "little-endian int32) starting from `root` (32 zero bytes by default; a cache salt can go "
      "there). Prompts that share a prefix share its digests. Runtimes with their own hash chain "
      "(vLLM's) pass theirs instead.");
}

}  // namespace prefixhit::py

NB_MODULE(_core, m) {
  namespace py = prefixhit::py;
  m.doc() = "prefixhit native core (nanobind). Import `prefixhit`, not this module.";
  py::register_error_translation();
  py::bind_masks(m);
  py::bind_specs(m);
  py::bind_stores(m);
  py::bind_block_index(m);
  py::bind_coordinator(m);
  py::bind_gpu_info(m);
  py::bind_hashing(m);
  py::bind_mirror(m);
  py::bind_store(m);
  py::bind_router(m);
}
