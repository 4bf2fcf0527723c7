// Fuzz target: ValidateKafkaOptions accepts an option set exactly when every
// (string) property in it is on outbox's allowlist for a non-superuser,
// librdkafka accepts it and brokers are named; it never lets a property load
// code into the validating backend, and its errors quote the option and
// librdkafka's message without trailing whitespace.
//
// Input: option lines (see option_lines.hpp), e.g.
// "sbootstrap.servers=127.0.0.1:9092\nsacks=all". kafka_options.dict lists
// librdkafka's property names so the fuzzer reaches real properties.
#include "option_lines.hpp"
#include "sinks/sink_options.hpp"

#include <dlfcn.h>
#include <librdkafka/rdkafka.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace {

using namespace outbox;

// Set while ValidateKafkaOptions runs: validation happens inside a user's
// backend, so loading a library then (plugin.library.paths does) would run
// arbitrary code there.
bool g_validating = false;

void Fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "invariant failed: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

// Interposes libc's dlopen for the whole process, librdkafka's plugin loader
// included (the executable's definition wins symbol resolution).
extern "C" void *dlopen(const char *file, int mode) {
  if (g_validating) Fail("validating options loads a library", file ? file : "(null)");
  using DlopenFn = void *(*)(const char *, int);
  static const DlopenFn real = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  return real(file, mode);
}

namespace {

std::string Describe(const SinkOptions &options) {
  std::string s;
  for (const SinkOption &o : options) s += o.key + "=" + o.text + " | ";
  return s;
}

struct Verdict {
  std::optional<std::string> error_key;  // the option blamed, or "bootstrap.servers"
  std::string librdkafka_message;        // set when librdkafka refused the option
};

// What the header promises, applied option by option to a configuration of
// our own: only allowlisted properties (as a non-superuser) ever reach
// rd_kafka_conf_set; SASL needs a mechanism other than GSSAPI.
Verdict RefValidate(const SinkOptions &options) {
  Verdict v;
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  bool has_bootstrap = false;
  std::string protocol, mechanism;
  for (const SinkOption &o : options) {
    if (o.kind != SinkOption::Kind::kString) {
      v.error_key = o.key;
      break;
    }
    const KafkaPropertyUse use = ClassifyKafkaProperty(o.key);
    if (use == KafkaPropertyUse::kSuperuser ||
        (use == KafkaPropertyUse::kRefused && KnownToLibrdkafka(o.key))) {
      v.error_key = o.key;
      break;
    }
    if (use == KafkaPropertyUse::kRefused) {
      // Never handed to librdkafka; refused in the words it uses for a
      // property it does not know.
      v.error_key = o.key;
      v.librdkafka_message = "No such configuration property: \"" + o.key + "\"";
      break;
    }
    char errstr[512] = "";
    if (rd_kafka_conf_set(conf, o.key.c_str(), o.text.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
      v.error_key = o.key;
      v.librdkafka_message = errstr;
      break;
    }
    if (o.key == "bootstrap.servers" || o.key == "metadata.broker.list") {
      has_bootstrap = !o.text.empty();
    }
    if (o.key == "security.protocol") protocol = o.text;
    if (o.key == "sasl.mechanisms" || o.key == "sasl.mechanism") mechanism = o.text;
  }
  if (!v.error_key && !has_bootstrap) v.error_key = "bootstrap.servers";
  for (char &c : protocol) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (char &c : mechanism) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!v.error_key && protocol.rfind("sasl_", 0) == 0 &&
      (mechanism.empty() || mechanism == "gssapi")) {
    v.error_key = "sasl.mechanisms";
  }
  rd_kafka_conf_destroy(conf);
  return v;
}

void ProveValidationMatchesLibrdkafka(const SinkOptions &options) {
  g_validating = true;
  const std::optional<std::string> err = ValidateKafkaOptions(options);
  g_validating = false;
  const Verdict want = RefValidate(options);

  if (err.has_value() != want.error_key.has_value()) {
    Fail(err ? "rejected options librdkafka accepts" : "accepted options it must refuse",
         Describe(options) + (err ? " -> " + *err : ""));
  }
  if (!err) return;
  if (err->empty() || err->back() == '\n' || err->back() == ' ') {
    Fail("error message ends in white space", *err);
  }
  if (err->find("\"" + *want.error_key + "\"") == std::string::npos) {
    Fail("error message does not quote the option", *err + " / " + Describe(options));
  }
  // librdkafka's own words appear verbatim (modulo the trimmed line end).
  std::string message = want.librdkafka_message;
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (err->find(message) == std::string::npos) {
    Fail("librdkafka's message is not quoted", *err + " / " + message);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SinkOptions options;
  if (!fuzz::DecodeOptionLines(data, size, &options)) return -1;  // -1: keep out of the corpus
  ProveValidationMatchesLibrdkafka(options);
  return 0;
}
