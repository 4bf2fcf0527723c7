// Fuzz target: ParseRedisOptions accepts exactly the options the contract
// lists, fills RedisOptions with the last value of each, leaves *out alone on
// error, names the offending option in its message, and round-trips: an
// accepted configuration written back as options parses to itself.
//
// Input: option lines (see option_lines.hpp), e.g. "shost=cache\nnport=6380".
#include "option_lines.hpp"
#include "sinks/sink_options.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

namespace {

using namespace outbox;
using Kind = SinkOption::Kind;

void Fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "invariant failed: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

bool Same(const RedisOptions &a, const RedisOptions &b) {
  return a.host == b.host && a.port == b.port && a.db == b.db && a.password == b.password &&
         a.mode == b.mode && a.maxlen == b.maxlen;
}

// ^-?[0-9]+$ within int64, by hand rather than through strtoll.
std::optional<int64_t> RefInteger(const std::string &s) {
  size_t i = 0;
  const bool neg = !s.empty() && s[0] == '-';
  if (neg) i = 1;
  if (i == s.size()) return std::nullopt;
  // Accumulate negatively so INT64_MIN fits.
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    const int d = s[i] - '0';
    if (v < (std::numeric_limits<int64_t>::min() + d) / 10) return std::nullopt;
    v = v * 10 - d;
  }
  if (!neg) {
    if (v == std::numeric_limits<int64_t>::min()) return std::nullopt;
    v = -v;
  }
  return v;
}

// The contract's reading: which option is wrong (or "maxlen" for the
// cross-option rule), or nothing with *out filled.
std::optional<std::string> RefParse(const SinkOptions &options, RedisOptions *out) {
  RedisOptions r;
  for (const SinkOption &o : options) {
    const bool numeric = o.key == "port" || o.key == "db" || o.key == "maxlen";
    if (!numeric && o.key != "host" && o.key != "password" && o.key != "mode") return o.key;
    if (o.kind == Kind::kOther || (o.kind == Kind::kNumber && !numeric)) return o.key;
    if (o.key == "host") {
      if (o.text.empty()) return o.key;
      r.host = o.text;
    } else if (o.key == "password") {
      r.password = o.text;
    } else if (o.key == "mode") {
      if (o.text == "stream") {
        r.mode = RedisOptions::Mode::kStream;
      } else if (o.text == "publish") {
        r.mode = RedisOptions::Mode::kPublish;
      } else if (o.text == "list") {
        r.mode = RedisOptions::Mode::kList;
      } else {
        return o.key;
      }
    } else {
      // A JSON number may carry a zero fraction (6379.0): its integer part
      // is the value. A string must be plain digits.
      std::string digits = o.text;
      const size_t dot = digits.find('.');
      if (o.kind == Kind::kNumber && dot != std::string::npos && dot + 1 < digits.size() &&
          digits.find_first_not_of('0', dot + 1) == std::string::npos) {
        digits.resize(dot);
      }
      const std::optional<int64_t> v = RefInteger(digits);
      if (!v) return o.key;
      if (o.key == "port") {
        if (*v < 1 || *v > 65535) return o.key;
        r.port = static_cast<int>(*v);
      } else if (o.key == "db") {
        if (*v < 0 || *v > std::numeric_limits<int32_t>::max()) return o.key;
        r.db = *v;
      } else {
        if (*v < 1) return o.key;
        r.maxlen = *v;
      }
    }
  }
  if (r.maxlen && r.mode != RedisOptions::Mode::kStream) return std::string("maxlen");
  *out = r;
  return std::nullopt;
}

std::string Describe(const SinkOptions &options) {
  std::string s;
  for (const SinkOption &o : options) {
    s += (o.kind == Kind::kNumber  ? "n:"
          : o.kind == Kind::kOther ? "o:"
                                   : "s:") +
         o.key + "=" + o.text + " | ";
  }
  return s;
}

SinkOptions WriteBack(const RedisOptions &r) {
  static const char *const kModes[] = {"stream", "publish", "list"};
  SinkOptions o = {{"host", Kind::kString, r.host},
                   {"port", Kind::kNumber, std::to_string(r.port)},
                   {"db", Kind::kString, std::to_string(r.db)},
                   {"mode", Kind::kString, kModes[static_cast<int>(r.mode)]}};
  if (r.password) o.push_back({"password", Kind::kString, *r.password});
  if (r.maxlen) o.push_back({"maxlen", Kind::kNumber, std::to_string(*r.maxlen)});
  return o;
}

void ProveParseFollowsContract(const SinkOptions &options) {
  RedisOptions sentinel;
  sentinel.host = "untouched";
  sentinel.port = 1;
  sentinel.password = "untouched";
  RedisOptions got = sentinel;
  const std::optional<std::string> err = ParseRedisOptions(options, &got);
  RedisOptions want;
  const std::optional<std::string> bad = RefParse(options, &want);

  if (err.has_value() != bad.has_value()) {
    Fail(err ? "rejected valid options" : "accepted invalid options", Describe(options));
  }
  if (err) {
    if (!Same(got, sentinel)) Fail("*out changed on error", Describe(options));
    if (err->find("\"" + *bad + "\"") == std::string::npos) {
      Fail("error message does not name the option", *err + " / " + Describe(options));
    }
    return;
  }
  if (!Same(got, want)) Fail("parsed values differ from the last values given", Describe(options));
  if (ParseRedisOptions(options, nullptr)) Fail("result depends on out being set", "");

  RedisOptions again;
  const SinkOptions written = WriteBack(got);
  if (ParseRedisOptions(written, &again) || !Same(again, got)) {
    Fail("accepted options do not round-trip", Describe(written));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SinkOptions options;
  if (!fuzz::DecodeOptionLines(data, size, &options)) return -1;  // -1: keep out of the corpus
  ProveParseFollowsContract(options);
  return 0;
}
