// SipHash-2-4: a 64-bit hash keyed with a secret, for tables whose keys come
// from users (event keys). An unkeyed hash lets a caller of emit() craft keys
// that collide with another application's: the order guard would then hold
// that application's events behind the caller's. With a random key per
// process nobody outside can aim for a collision. PostgreSQL-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace outbox {

struct HashKey {
  uint64_t k0 = 0x736f6d6570736575ULL;  // fixed defaults (tests); processes use random ones
  uint64_t k1 = 0x646f72616e646f6dULL;
};

// SipHash-2-4 of n bytes (the reference function; its published test
// vectors check this one).
uint64_t SipHash24(const HashKey &key, const void *data, size_t n);

// SipHash-2-4 of the bytes of `parts`, each followed by its length (so that
// ("ab", "c") and ("a", "bc") differ).
uint64_t KeyedHash(const HashKey &key, std::string_view first, std::string_view second);

}  // namespace outbox
