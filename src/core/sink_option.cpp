// The rule for sink option values from the environment (sink_option.hpp).
#include "core/sink_option.hpp"

namespace outbox {

bool IsSecretVariableName(std::string_view name) {
  constexpr std::string_view kPrefix = "OUTBOX_";
  if (name.size() <= kPrefix.size() || name.size() > kPrefix.size() + 64 ||
      name.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  for (char c : name) {
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

std::optional<std::string> CheckSecretSources(const SinkOptions &options, bool superuser) {
  static const char *const kSecretOptions[] = {"sasl.password",
                                               "ssl.key.password",
                                               "ssl.keystore.password",
                                               "ssl.key.pem",
                                               "sasl.oauthbearer.client.secret",
                                               "sasl.oauthbearer.config",
                                               "password",
                                               "token",
                                               "secret"};
  for (const SinkOption &opt : options) {
    if (!opt.from_environment) continue;
    if (!superuser) {
      return "option \"" + opt.key +
             "\": a value from the server's environment may only be given by a superuser";
    }
    bool secret = false;
    for (const char *name : kSecretOptions) secret = secret || opt.key == name;
    if (!secret) {
      return "option \"" + opt.key +
             "\" may not come from the environment (only passwords, keys and secrets may)";
    }
  }
  return std::nullopt;
}

}  // namespace outbox
