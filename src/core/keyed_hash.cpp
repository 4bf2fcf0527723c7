#include "core/keyed_hash.hpp"

#include <algorithm>
#include <cstring>

namespace outbox {

namespace {

constexpr uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;

  void Round() {
    v0 += v1;
    v1 = Rotl(v1, 13);
    v1 ^= v0;
    v0 = Rotl(v0, 32);
    v2 += v3;
    v3 = Rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = Rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = Rotl(v1, 17);
    v1 ^= v2;
    v2 = Rotl(v2, 32);
  }
  void Compress(uint64_t m) {
    v3 ^= m;
    Round();
    Round();
    v0 ^= m;
  }
};

uint64_t Load64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];  // little-endian, as the reference
  return v;
}

// A byte stream fed to SipHash eight bytes at a time.
class Feeder {
 public:
  explicit Feeder(SipState *s) : s_(s) {}
  void Add(const void *data, size_t n) {
    const auto *p = static_cast<const unsigned char *>(data);
    total_ += n;
    while (n > 0) {
      const size_t take = std::min(n, sizeof buf_ - used_);
      std::memcpy(buf_ + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == sizeof buf_) {
        s_->Compress(Load64(buf_));
        used_ = 0;
      }
    }
  }
  uint64_t Finish() {
    unsigned char last[8] = {0};
    std::memcpy(last, buf_, used_);
    last[7] = static_cast<unsigned char>(total_);
    s_->Compress(Load64(last));
    s_->v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) s_->Round();
    return s_->v0 ^ s_->v1 ^ s_->v2 ^ s_->v3;
  }

 private:
  SipState *s_;
  unsigned char buf_[8] = {0};
  size_t used_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

namespace {
SipState Start(const HashKey &key) {
  return SipState{key.k0 ^ 0x736f6d6570736575ULL, key.k1 ^ 0x646f72616e646f6dULL,
                  key.k0 ^ 0x6c7967656e657261ULL, key.k1 ^ 0x7465646279746573ULL};
}
}  // namespace

uint64_t SipHash24(const HashKey &key, const void *data, size_t n) {
  SipState s = Start(key);
  Feeder f(&s);
  f.Add(data, n);
  return f.Finish();
}

uint64_t KeyedHash(const HashKey &key, std::string_view first, std::string_view second) {
  SipState s = Start(key);
  Feeder f(&s);
  const uint64_t n1 = first.size(), n2 = second.size();
  f.Add(first.data(), first.size());
  f.Add(&n1, sizeof n1);
  f.Add(second.data(), second.size());
  f.Add(&n2, sizeof n2);
  return f.Finish();
}

}  // namespace outbox
