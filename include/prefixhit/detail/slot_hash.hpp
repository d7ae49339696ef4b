// The slot hash of the block indexes (detail/index_slots.hpp), written once for the CPU BlockIndex
// and the CUDA DeviceBlockIndex: three AES encryption rounds over a key's 32 digest bytes and its
// meta word, keyed by the index's secret.
//
//   state = (w0 ^ k0 ^ meta, w1 ^ k1)     the digest's first 16 bytes, whitened
//   state = aesenc(state, (w2, w3))       its last 16 bytes enter as the first round key
//   state = aesenc(state, (k2, k3))
//   state = aesenc(state, (k4, k5))       the hash is the low 64 bits
//
// Why AES rounds: a cache-resident lookup is bound by its instructions, and on x86 three AESENC
// instructions hash a key in about 7 instructions, where the three 64x64->128-bit multiplies
// before them took about 21 (13% fewer instructions per lookup, 14% less time: docs/perf/cpu.md,
// twenty-fourth round). Every input byte passes two rounds or more, so each output byte depends
// on all 32 digest bytes and the meta word (one AES round spreads a byte over its column, two
// over the state).
//
// On aarch64 the crypto extension's AESE and AESMC compute the same rounds. Where neither is built
// in (PREFIXHIT_CPU_AES=OFF, other CPUs, the GPU) the same rounds run from a table of the S-box
// (aes_enc_round): one definition of the hash, and the instructions are its fast paths, checked
// against it (tests/cpu/slot_hash_test.cpp; aarch64 under qemu: scripts/check-arm-hash.sh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "prefixhit/detail/hd.hpp"

// The CPU's own AES instructions, where the build enables them (CMake option PREFIXHIT_CPU_AES):
// AES-NI on x86-64 (-maes), the crypto extension's AESE/AESMC on aarch64 (+crypto).
#if !PREFIXHIT_DEVICE_CODE && defined(__AES__) && (defined(__x86_64__) || defined(__i386__))
#include <wmmintrin.h>
#define PREFIXHIT_SLOT_HASH_AESNI 1
#define PREFIXHIT_SLOT_HASH_ARM_AES 0
#elif !PREFIXHIT_DEVICE_CODE && defined(__aarch64__) && \
    (defined(__ARM_FEATURE_AES) || defined(__ARM_FEATURE_CRYPTO))
#include <arm_neon.h>
#define PREFIXHIT_SLOT_HASH_AESNI 0
#define PREFIXHIT_SLOT_HASH_ARM_AES 1
#else
#define PREFIXHIT_SLOT_HASH_AESNI 0
#define PREFIXHIT_SLOT_HASH_ARM_AES 0
#endif

namespace prefixhit::detail {

/// The per-index secret of the hash: derived from the seed, so crafted digests cannot aim at one
/// bucket without knowing it. k[0..1] whiten the first 16 digest bytes, k[2..5] are the second
/// and third rounds' keys.
struct IndexHashKey {
  std::uint64_t k[6];
};

/// splitmix64: expands one seed word into the hash secret.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

PREFIXHIT_HD inline IndexHashKey make_hash_key(std::uint64_t seed) {
  IndexHashKey key{};
  std::uint64_t state = seed;
  for (std::uint64_t& word : key.k) {
    word = splitmix64(state);
  }
  return key;
}

// The AES S-box (FIPS-197, 5.1.1). tests/cpu/slot_hash_test.cpp derives every entry from its
// definition (the inverse in GF(2^8), then the affine map).
// clang-format off
#define PREFIXHIT_AES_SBOX_BYTES                                                                  \
  0x63, 0x7c, 0x77, 0x7b, 0xf2, 0x6b, 0x6f, 0xc5, 0x30, 0x01, 0x67, 0x2b, 0xfe, 0xd7, 0xab, 0x76, \
  0xca, 0x82, 0xc9, 0x7d, 0xfa, 0x59, 0x47, 0xf0, 0xad, 0xd4, 0xa2, 0xaf, 0x9c, 0xa4, 0x72, 0xc0, \
  0xb7, 0xfd, 0x93, 0x26, 0x36, 0x3f, 0xf7, 0xcc, 0x34, 0xa5, 0xe5, 0xf1, 0x71, 0xd8, 0x31, 0x15, \
  0x04, 0xc7, 0x23, 0xc3, 0x18, 0x96, 0x05, 0x9a, 0x07, 0x12, 0x80, 0xe2, 0xeb, 0x27, 0xb2, 0x75, \
  0x09, 0x83, 0x2c, 0x1a, 0x1b, 0x6e, 0x5a, 0xa0, 0x52, 0x3b, 0xd6, 0xb3, 0x29, 0xe3, 0x2f, 0x84, \
  0x53, 0xd1, 0x00, 0xed, 0x20, 0xfc, 0xb1, 0x5b, 0x6a, 0xcb, 0xbe, 0x39, 0x4a, 0x4c, 0x58, 0xcf, \
  0xd0, 0xef, 0xaa, 0xfb, 0x43, 0x4d, 0x33, 0x85, 0x45, 0xf9, 0x02, 0x7f, 0x50, 0x3c, 0x9f, 0xa8, \
  0x51, 0xa3, 0x40, 0x8f, 0x92, 0x9d, 0x38, 0xf5, 0xbc, 0xb6, 0xda, 0x21, 0x10, 0xff, 0xf3, 0xd2, \
  0xcd, 0x0c, 0x13, 0xec, 0x5f, 0x97, 0x44, 0x17, 0xc4, 0xa7, 0x7e, 0x3d, 0x64, 0x5d, 0x19, 0x73, \
  0x60, 0x81, 0x4f, 0xdc, 0x22, 0x2a, 0x90, 0x88, 0x46, 0xee, 0xb8, 0x14, 0xde, 0x5e, 0x0b, 0xdb, \
  0xe0, 0x32, 0x3a, 0x0a, 0x49, 0x06, 0x24, 0x5c, 0xc2, 0xd3, 0xac, 0x62, 0x91, 0x95, 0xe4, 0x79, \
  0xe7, 0xc8, 0x37, 0x6d, 0x8d, 0xd5, 0x4e, 0xa9, 0x6c, 0x56, 0xf4, 0xea, 0x65, 0x7a, 0xae, 0x08, \
  0xba, 0x78, 0x25, 0x2e, 0x1c, 0xa6, 0xb4, 0xc6, 0xe8, 0xdd, 0x74, 0x1f, 0x4b, 0xbd, 0x8b, 0x8a, \
  0x70, 0x3e, 0xb5, 0x66, 0x48, 0x03, 0xf6, 0x0e, 0x61, 0x35, 0x57, 0xb9, 0x86, 0xc1, 0x1d, 0x9e, \
  0xe1, 0xf8, 0x98, 0x11, 0x69, 0xd9, 0x8e, 0x94, 0x9b, 0x1e, 0x87, 0xe9, 0xce, 0x55, 0x28, 0xdf, \
  0x8c, 0xa1, 0x89, 0x0d, 0xbf, 0xe6, 0x42, 0x68, 0x41, 0x99, 0x2d, 0x0f, 0xb0, 0x54, 0xbb, 0x16
// clang-format on

inline constexpr std::uint8_t kAesSbox[256] = {PREFIXHIT_AES_SBOX_BYTES};

/// SubBytes and MixColumns of one byte in row 0 of a column, as a column word: the S-box value
/// times (2, 1, 1, 3). A byte in row r contributes this word rotated left by 8r bits, so a round
/// costs a table load, a rotate and a xor per byte: the hash is 325 PTX instructions, where
/// SubBytes and then MixColumns took 495 (docs/design/device-index.md).
struct AesTable {
  std::uint32_t t0[256];
};

PREFIXHIT_HD constexpr std::uint32_t aes_double(std::uint32_t b) {
  return ((b << 1) ^ ((b & 0x80U) != 0 ? 0x1BU : 0U)) & 0xFFU;
}

PREFIXHIT_HD constexpr AesTable make_aes_table() {
  AesTable table{};
  for (int x = 0; x < 256; ++x) {
    const std::uint32_t s = kAesSbox[x];
    table.t0[x] = aes_double(s) | s << 8 | s << 16 | (aes_double(s) ^ s) << 24;
  }
  return table;
}

inline constexpr AesTable kAesTable = make_aes_table();
#if defined(__CUDACC__)
// The device's copy: a namespace-scope constexpr object is host memory to nvcc. 1 KiB, which
// stays in the L1.
static __device__ const AesTable kAesTableDevice = make_aes_table();
#endif

PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t aes_t0(std::uint32_t byte) {
#if defined(__CUDA_ARCH__)
  return kAesTableDevice.t0[byte];
#else
  return kAesTable.t0[byte];
#endif
}

/// An AES state as x86 holds it in a register: bytes 0-15, byte i in row i % 4 of column i / 4;
/// column c is the little-endian word c.
struct AesState {
  std::uint32_t col[4];
};

PREFIXHIT_HD PREFIXHIT_FORCEINLINE AesState aes_state_of(std::uint64_t lo, std::uint64_t hi) {
  return AesState{{static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(lo >> 32),
                   static_cast<std::uint32_t>(hi), static_cast<std::uint32_t>(hi >> 32)}};
}

PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t rotate_left(std::uint32_t w, int bits) {
  return (w << bits) | (w >> (32 - bits));
}

/// One AES encryption round, as x86's AESENC: SubBytes, ShiftRows (row r of column j comes from
/// column j + r), MixColumns, then the round key. Only the first kColumns columns are computed
/// (the hash's last round needs two).
template <int kColumns = 4>
PREFIXHIT_HD PREFIXHIT_FORCEINLINE AesState aes_enc_round(const AesState& s, const AesState& key) {
  AesState out{};
  for (int j = 0; j < kColumns; ++j) {
    out.col[j] = aes_t0(s.col[j] & 0xFFU) ^
                 rotate_left(aes_t0((s.col[(j + 1) & 3] >> 8) & 0xFFU), 8) ^
                 rotate_left(aes_t0((s.col[(j + 2) & 3] >> 16) & 0xFFU), 16) ^
                 rotate_left(aes_t0(s.col[(j + 3) & 3] >> 24), 24) ^ key.col[j];
  }
  return out;
}

/// The digest's first 8 bytes are xored with this: the first secret word, the meta word in both
/// halves (the definition above; every form takes it from here).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t first_key_word(std::uint32_t meta,
                                                                const IndexHashKey& secret) {
  return secret.k[0] ^ (std::uint64_t{meta} << 32 | meta);
}

/// The definition of the slot hash (above), from the table: what the GPU runs, and a CPU built
/// without its AES instructions. `meta` is the key's packed meta word.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t slot_hash_words(std::uint64_t w0, std::uint64_t w1,
                                                                 std::uint64_t w2, std::uint64_t w3,
                                                                 std::uint32_t meta,
                                                                 const IndexHashKey& secret) {
  AesState s = aes_state_of(w0 ^ first_key_word(meta, secret), w1 ^ secret.k[1]);
  s = aes_enc_round(s, aes_state_of(w2, w3));
  s = aes_enc_round(s, aes_state_of(secret.k[2], secret.k[3]));
  s = aes_enc_round<2>(s, aes_state_of(secret.k[4], secret.k[5]));
  return static_cast<std::uint64_t>(s.col[1]) << 32 | s.col[0];
}

/// The slot hash of 32 key bytes where they lie (any alignment) and a meta word.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t slot_hash_bytes(const void* bytes32,
                                                                 std::uint32_t meta,
                                                                 const IndexHashKey& secret) {
#if PREFIXHIT_SLOT_HASH_AESNI
  const auto* p = static_cast<const __m128i*>(bytes32);
  const auto word = [](std::uint64_t w) { return static_cast<long long>(w); };
  __m128i s = _mm_xor_si128(_mm_loadu_si128(p),
                            _mm_set_epi64x(word(secret.k[1]), word(first_key_word(meta, secret))));
  s = _mm_aesenc_si128(s, _mm_loadu_si128(p + 1));
  s = _mm_aesenc_si128(s, _mm_set_epi64x(word(secret.k[3]), word(secret.k[2])));
  s = _mm_aesenc_si128(s, _mm_set_epi64x(word(secret.k[5]), word(secret.k[4])));
  return static_cast<std::uint64_t>(_mm_cvtsi128_si64(s));
#elif PREFIXHIT_SLOT_HASH_ARM_AES
  // AESE xors its key first and has no MixColumns, so AESENC(s, k) is AESMC(AESE(s, 0)) ^ k, and
  // each round's key folds into the next AESE: AESMC(AESE(s, k)) is AESENC's round on s ^ k.
  const auto* p = static_cast<const std::uint8_t*>(bytes32);
  const auto pair = [](std::uint64_t lo, std::uint64_t hi) {
    return vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(lo), vcreate_u64(hi)));
  };
  uint8x16_t s =
      vaesmcq_u8(vaeseq_u8(vld1q_u8(p), pair(first_key_word(meta, secret), secret.k[1])));
  s = vaesmcq_u8(vaeseq_u8(s, vld1q_u8(p + 16)));
  s = vaesmcq_u8(vaeseq_u8(s, pair(secret.k[2], secret.k[3])));
  s = veorq_u8(s, pair(secret.k[4], secret.k[5]));
  return vgetq_lane_u64(vreinterpretq_u64_u8(s), 0);
#else
  const auto* bytes = static_cast<const unsigned char*>(bytes32);
  std::uint64_t w[4];
  for (std::size_t i = 0; i < 4; ++i) {
    std::memcpy(&w[i], bytes + sizeof(w[i]) * i, sizeof(w[i]));
  }
  return slot_hash_words(w[0], w[1], w[2], w[3], meta, secret);
#endif
}

}  // namespace prefixhit::detail
