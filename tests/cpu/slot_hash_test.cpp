// The slot hash (detail/slot_hash.hpp): its AES round against FIPS-197 and the S-box against its
// definition, and the CPU instructions' fast path (AES-NI, or aarch64's AESE/AESMC: what this
// build's CPU index runs) against the table form (what the GPU and builds without them run), on
// fresh random keys. scripts/check-arm-hash.sh runs this file on aarch64 under qemu.
#include "prefixhit/detail/slot_hash.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

namespace prefixhit::detail {
namespace {

/// Multiplication in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1, bit by bit.
std::uint8_t gf_multiply(std::uint8_t a, std::uint8_t b) {
  std::uint8_t product = 0;
  for (int i = 0; i < 8; ++i) {
    if ((b >> i) & 1U) {
      product ^= a;
    }
    a = static_cast<std::uint8_t>((a << 1) ^ ((a & 0x80U) != 0 ? 0x1BU : 0U));
  }
  return product;
}

AesState state_of_bytes(const std::array<std::uint8_t, 16>& bytes) {
  AesState s{};
  for (int i = 0; i < 16; ++i) {
    s.col[i / 4] |= std::uint32_t{bytes[i]} << (8 * (i % 4));
  }
  return s;
}

std::array<std::uint8_t, 16> hex_bytes(const char* hex) {
  std::array<std::uint8_t, 16> out{};
  for (int i = 0; i < 16; ++i) {
    out[i] = static_cast<std::uint8_t>(std::stoul(std::string(hex + 2 * i, 2), nullptr, 16));
  }
  return out;
}

bool same_state(const AesState& a, const AesState& b) {
  return std::memcmp(a.col, b.col, sizeof(a.col)) == 0;
}

TEST(SlotHash, SboxIsTheInverseInGf256ThenTheAffineMap) {
  for (int x = 0; x < 256; ++x) {
    std::uint8_t inverse = 0;  // 0 maps to 0
    for (int y = 1; y < 256 && x != 0; ++y) {
      if (gf_multiply(static_cast<std::uint8_t>(x), static_cast<std::uint8_t>(y)) == 1) {
        inverse = static_cast<std::uint8_t>(y);
      }
    }
    std::uint8_t affine = 0x63;
    for (int bit = 0; bit < 8; ++bit) {
      int b = 0;
      for (int k : {0, 4, 5, 6, 7}) {
        b ^= (inverse >> ((bit + k) % 8)) & 1;
      }
      affine = static_cast<std::uint8_t>(affine ^ (b << bit));
    }
    EXPECT_EQ(kAesSbox[x], affine) << "S-box entry " << x;
    // The round's table: the S-box value times MixColumns' first column (2, 1, 1, 3).
    const std::uint32_t column = std::uint32_t{gf_multiply(affine, 2)} |
                                 std::uint32_t{affine} << 8 | std::uint32_t{affine} << 16 |
                                 std::uint32_t{gf_multiply(affine, 3)} << 24;
    EXPECT_EQ(aes_t0(static_cast<std::uint32_t>(x)), column) << "table entry " << x;
  }
}

TEST(SlotHash, RoundMatchesFips197AppendixB) {
  // FIPS-197 Appendix B, round 1: the state at its start, the round key, the next round's start.
  const AesState start = state_of_bytes(hex_bytes("193de3bea0f4e22b9ac68d2ae9f84808"));
  const AesState key = state_of_bytes(hex_bytes("a0fafe1788542cb123a339392a6c7605"));
  const AesState next = state_of_bytes(hex_bytes("a49c7ff2689f352b6b5bea43026a5049"));
  EXPECT_TRUE(same_state(aes_enc_round(start, key), next));
  // The last round of the hash computes only its two low columns, and those exactly.
  const AesState two = aes_enc_round<2>(start, key);
  EXPECT_EQ(two.col[0], next.col[0]);
  EXPECT_EQ(two.col[1], next.col[1]);
}

#if PREFIXHIT_SLOT_HASH_AESNI || PREFIXHIT_SLOT_HASH_ARM_AES

std::uint64_t fresh_seed() {
  return (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

/// One AESENC round by the CPU's own instruction: x86's AESENC, or aarch64's AESMC(AESE(s, 0)) ^ k.
AesState hardware_round(const AesState& s, const AesState& key) {
  AesState out{};
#if PREFIXHIT_SLOT_HASH_AESNI
  __m128i state;
  __m128i round_key;
  std::memcpy(&state, s.col, sizeof(state));
  std::memcpy(&round_key, key.col, sizeof(round_key));
  const __m128i result = _mm_aesenc_si128(state, round_key);
  std::memcpy(out.col, &result, sizeof(out.col));
#else
  const uint8x16_t state = vld1q_u8(reinterpret_cast<const std::uint8_t*>(s.col));
  const uint8x16_t round_key = vld1q_u8(reinterpret_cast<const std::uint8_t*>(key.col));
  const uint8x16_t result = veorq_u8(vaesmcq_u8(vaeseq_u8(state, vdupq_n_u8(0))), round_key);
  vst1q_u8(reinterpret_cast<std::uint8_t*>(out.col), result);
#endif
  return out;
}

TEST(SlotHash, TableRoundMatchesTheCpuInstruction) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 10000; ++i) {
    const AesState s = aes_state_of(rng(), rng());
    const AesState key = aes_state_of(rng(), rng());
    ASSERT_TRUE(same_state(aes_enc_round(s, key), hardware_round(s, key))) << "case " << i;
  }
}

TEST(SlotHash, InstructionHashEqualsTheTableDefinitionAtEveryAlignment) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  alignas(64) unsigned char buffer[64 + 32];
  for (int i = 0; i < 20000; ++i) {
    const IndexHashKey secret = make_hash_key(rng());
    std::uint64_t w[4];
    for (auto& word : w) {
      // Mostly random words; some zero, as the padding of 8- and 16-byte digests.
      word = rng() % 4 == 0 ? 0 : rng();
    }
    const auto meta = static_cast<std::uint32_t>(rng());
    const std::size_t offset = static_cast<std::size_t>(i % 64);
    std::memcpy(buffer + offset, w, sizeof(w));
    ASSERT_EQ(slot_hash_bytes(buffer + offset, meta, secret),
              slot_hash_words(w[0], w[1], w[2], w[3], meta, secret))
        << "case " << i << " at offset " << offset;
  }
}

#else

TEST(SlotHash, TableRoundMatchesTheCpuInstruction) {
  GTEST_SKIP() << "built without the CPU's AES instructions (PREFIXHIT_CPU_AES=OFF, or a CPU "
                  "without them): the table form is the only one";
}

#endif

}  // namespace
}  // namespace prefixhit::detail
