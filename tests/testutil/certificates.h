// Test certificates made with the openssl command-line tool: a CA and leaf certificates it signs, for mutual TLS
// between daemons and to etcd in tests.
#ifndef KVT_TESTS_TESTUTIL_CERTIFICATES_H_
#define KVT_TESTS_TESTUTIL_CERTIFICATES_H_

#include <string>
#include <vector>

namespace kvt::testutil {

// Whether the openssl command-line tool runs here.
bool HaveOpenssl();

// Writes a CA and, per name, a certificate it signs (SAN IP:127.0.0.1, DNS:localhost; server and client auth)
// into `dir`: ca.pem, <name>.pem, <name>.key; openssl's output goes to <dir>/openssl.log. False if openssl fails.
bool MakeCertificates(const std::string& dir, const std::vector<std::string>& names);

}  // namespace kvt::testutil

#endif  // KVT_TESTS_TESTUTIL_CERTIFICATES_H_
