// The NATS sink's reading and judgement of JetStream's answers
// (nats_replies.hpp). The JSON reader is just enough for JetStream's API
// answers, and safe on anything: whoever answers on a subject may send any
// bytes (nesting is bounded, numbers are read only when integral).
#include "sinks/nats_replies.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

namespace {

constexpr int kMaxDepth = 32;

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  bool AtEnd() {
    SkipSpace();
    return at_ == text_.size();
  }

  bool Consume(char c) {
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  char Peek() {
    SkipSpace();
    return at_ < text_.size() ? text_[at_] : '\0';
  }

  // A string literal, its escapes decoded (\u as UTF-8; a lone surrogate
  // as U+FFFD).
  bool String(std::string *out) {
    if (!Consume('"')) return false;
    out->clear();
    while (at_ < text_.size()) {
      const char c = text_[at_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (at_ >= text_.size()) return false;
      const char e = text_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF && text_.substr(at_, 2) == "\\u") {
            const size_t save = at_;
            at_ += 2;
            uint32_t low = 0;
            if (Hex4(&low) && low >= 0xDC00 && low <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else {
              at_ = save;
            }
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
          AppendUtf8(cp, out);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  // A number's text, checked against JSON's grammar.
  bool Number(std::string_view *out) {
    SkipSpace();
    const size_t start = at_;
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    if (!Digits()) return false;
    if (at_ < text_.size() && text_[at_] == '.') {
      ++at_;
      if (!Digits()) return false;
    }
    if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
      ++at_;
      if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
      if (!Digits()) return false;
    }
    *out = text_.substr(start, at_ - start);
    return true;
  }

  bool Literal(std::string_view word) {
    SkipSpace();
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  // Any value, read and forgotten.
  bool Skip(int depth) {
    if (depth > kMaxDepth) return false;
    const char c = Peek();
    if (c == '"') {
      std::string ignored;
      return String(&ignored);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      Consume(c);
      if (Consume(close)) return true;
      do {
        if (c == '{') {
          std::string ignored;
          if (!String(&ignored) || !Consume(':')) return false;
        }
        if (!Skip(depth + 1)) return false;
      } while (Consume(','));
      return Consume(close);
    }
    if (c == 't') return Literal("true");
    if (c == 'f') return Literal("false");
    if (c == 'n') return Literal("null");
    std::string_view ignored;
    return Number(&ignored);
  }

 private:
  void SkipSpace() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) {
      ++at_;
    }
  }

  bool Digits() {
    const size_t start = at_;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
    return at_ > start;
  }

  bool Hex4(uint32_t *out) {
    if (text_.size() - at_ < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[at_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<uint32_t>(h - 'A' + 10);
      } else {
        return false;
      }
    }
    *out = v;
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string *out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string_view text_;
  size_t at_ = 0;
};

// An integral JSON number's value; nothing for fractions, exponents and
// what does not fit.
std::optional<int64_t> Integer(std::string_view number) {
  const bool negative = !number.empty() && number[0] == '-';
  if (negative) number.remove_prefix(1);
  if (number.empty() || number.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : number) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return negative ? -v : v;
}

// A member whose value is read as an integer when it is one, else skipped.
bool IntegerMember(JsonReader *in, std::optional<int64_t> *out) {
  if (in->Peek() == '-' || (in->Peek() >= '0' && in->Peek() <= '9')) {
    std::string_view number;
    if (!in->Number(&number)) return false;
    *out = Integer(number);
    return true;
  }
  return in->Skip(1);
}

bool ParseError(JsonReader *in, JetStreamReply *out) {
  if (in->Peek() != '{') return in->Skip(1);
  out->has_error = true;
  in->Consume('{');
  if (in->Consume('}')) return true;
  do {
    std::string name;
    if (!in->String(&name) || !in->Consume(':')) return false;
    std::optional<int64_t> number;
    if (name == "code" || name == "err_code") {
      if (!IntegerMember(in, &number)) return false;
      (name == "code" ? out->code : out->err_code) = number.value_or(0);
    } else if (name == "description" && in->Peek() == '"') {
      if (!in->String(&out->description)) return false;
    } else if (!in->Skip(2)) {
      return false;
    }
  } while (in->Consume(','));
  return in->Consume('}');
}

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace

bool ParseJetStreamReply(std::string_view json, JetStreamReply *out) {
  *out = JetStreamReply();
  JsonReader in(json);
  if (!in.Consume('{')) return false;
  if (!in.Consume('}')) {
    do {
      std::string name;
      if (!in.String(&name) || !in.Consume(':')) return false;
      std::optional<int64_t> number;
      if (name == "stream" && in.Peek() == '"') {
        std::string stream;
        if (!in.String(&stream)) return false;
        out->stream = std::move(stream);
      } else if (name == "seq" || name == "total") {
        if (!IntegerMember(&in, &number)) return false;
        if (number && *number >= 0) {
          if (name == "seq") {
            out->seq = static_cast<uint64_t>(*number);
          } else {
            out->total = *number;
          }
        }
      } else if (name == "duplicate" && (in.Peek() == 't' || in.Peek() == 'f')) {
        out->duplicate = in.Literal("true");
        if (!out->duplicate && !in.Literal("false")) return false;
      } else if (name == "error") {
        if (!ParseError(&in, out)) return false;
      } else if (!in.Skip(1)) {
        return false;
      }
    } while (in.Consume(','));
    if (!in.Consume('}')) return false;
  }
  return in.AtEnd();
}

DeliveryStatus ClassifyJetStreamError(int64_t code, int64_t err_code,
                                      std::string_view description) {
  (void)code;
  switch (err_code) {
    case 10054:  // message size exceeds maximum allowed (the stream's max_msg_size)
    case 10097:  // header size exceeds maximum allowed of 64k
    case 10060:  // expected stream does not match
    case 10063:  // expected stream sequence does not match
    case 10070:  // wrong last msg ID
    case 10071:  // wrong last sequence
    case 10111:  // rollup failed
      return DeliveryStatus::kRejected;
    case 10109:  // invalid operation on sealed stream
      return DeliveryStatus::kTargetRefused;
    case 10077:  // store failed: the limit that refused it says whose fault it is
      if (Contains(description, "message too large")) return DeliveryStatus::kRejected;
      if (Contains(description, "maximum messages") || Contains(description, "maximum bytes")) {
        return DeliveryStatus::kTargetRefused;  // a stream with discard=new is full
      }
      return DeliveryStatus::kRetriable;  // the store itself failed (disk, closed)
    default:
      // 10023 insufficient resources, 10002 account resources exceeded,
      // 10047/10028 storage or memory resources, 10039/10076 JetStream not
      // enabled, 10008 temporarily unavailable, 10118 stream offline, and
      // codes we do not know: none of them is this message's doing.
      return DeliveryStatus::kRetriable;
  }
}

std::string JetStreamErrorText(const JetStreamReply &reply) {
  std::string text = "JetStream refused it: ";
  text += reply.description.empty() ? "no description" : reply.description;
  text += " (" + std::to_string(reply.code) + "/" + std::to_string(reply.err_code) + ")";
  return text;
}

}  // namespace outbox
