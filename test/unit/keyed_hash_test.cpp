// The order guard's pair hash: SipHash-2-4 as published (its reference test
// vectors), and the framing that keeps two fields apart.
#include "core/keyed_hash.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace outbox {
namespace {

// The reference key 00 01 .. 0f.
HashKey ReferenceKey() { return HashKey{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL}; }

uint64_t OfFirstBytes(size_t n) {
  std::vector<unsigned char> message(n);
  for (size_t i = 0; i < n; ++i) message[i] = static_cast<unsigned char>(i);
  return SipHash24(ReferenceKey(), message.data(), n);
}

TEST(KeyedHash, SipHash24MatchesTheReferenceVectors) {
  EXPECT_EQ(OfFirstBytes(0), 0x726fdb47dd0e0e31ULL);
  EXPECT_EQ(OfFirstBytes(1), 0x74f839c593dc67fdULL);
  EXPECT_EQ(OfFirstBytes(2), 0x0d6c8009d9a94f5aULL);
  EXPECT_EQ(OfFirstBytes(3), 0x85676696d7fb7e2dULL);
  EXPECT_EQ(OfFirstBytes(15), 0xa129ca6149be45e5ULL);  // the paper's example
  EXPECT_EQ(OfFirstBytes(63), 0x958a324ceb064572ULL);
}

TEST(KeyedHash, FieldsAreFramedSoTheirBoundaryCounts) {
  const HashKey key = ReferenceKey();
  EXPECT_NE(KeyedHash(key, "ab", "c"), KeyedHash(key, "a", "bc"));
  EXPECT_NE(KeyedHash(key, "orders.*", ""), KeyedHash(key, "", "orders.*"));
  EXPECT_EQ(KeyedHash(key, "orders.*", "k"), KeyedHash(key, "orders.*", "k"));
}

TEST(KeyedHash, AnotherSecretGivesOtherValues) {
  const HashKey other{1, 2};
  EXPECT_NE(KeyedHash(ReferenceKey(), "orders.*", "customer-1"),
            KeyedHash(other, "orders.*", "customer-1"));
  const std::string big(4096, 'k');  // keys may be 4 kB
  EXPECT_NE(KeyedHash(ReferenceKey(), "orders.*", big), KeyedHash(other, "orders.*", big));
}

}  // namespace
}  // namespace outbox
