// Certificates for the TLS tests of the sinks (amqp_tls_test.cpp,
// mqtt_tls_test.cpp): made by openssl's command line into a directory of
// the test's own.
#pragma once

#include <cstdlib>
#include <string>

namespace outbox {
namespace test_support {

// The self-signed authority and the server certificate (for localhost and
// 127.0.0.1) a TLS listener uses; openssl's command line makes them.
inline bool MakeCertificates(const std::string &dir) {
  const std::string cmd =
      "cd '" + dir +
      "' && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=outbox-test-ca "
      "-keyout ca.key -out ca.pem && "
      "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key "
      "-out server.csr && "
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile san.ext -out server.pem && chmod 0644 server.key";
  return std::system(("(" + cmd + ") >'" + dir + "/openssl.log' 2>&1").c_str()) == 0;
}

}  // namespace test_support
}  // namespace outbox
