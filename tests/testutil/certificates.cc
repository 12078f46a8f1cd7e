#include "tests/testutil/certificates.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace kvt::testutil {

bool HaveOpenssl() { return std::system("openssl version >/dev/null 2>&1") == 0; }

bool MakeCertificates(const std::string& dir, const std::vector<std::string>& names) {
  const std::string ext = absl::StrCat(dir, "/leaf.ext");
  std::ofstream(ext) << "basicConstraints=CA:FALSE\n"
                        "keyUsage=critical,digitalSignature,keyEncipherment\n"
                        "extendedKeyUsage=serverAuth,clientAuth\n"
                        "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  const std::string quiet = " >>" + dir + "/openssl.log 2>&1";
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  if (std::system(absl::StrCat("openssl req -x509 ", key, " -keyout ", dir, "/ca.key -out ", dir,
                               "/ca.pem -days 2 -subj /CN=kvt-test-ca",
                               " -addext basicConstraints=critical,CA:TRUE",
                               " -addext keyUsage=critical,keyCertSign,cRLSign", quiet)
                      .c_str()) != 0) {
    return false;
  }
  for (const std::string& n : names) {
    const std::string base = absl::StrCat(dir, "/", n);
    if (std::system(absl::StrCat("openssl req ", key, " -keyout ", base, ".key -out ", base, ".csr -subj /CN=", n,
                                 quiet)
                        .c_str()) != 0 ||
        std::system(absl::StrCat("openssl x509 -req -in ", base, ".csr -CA ", dir, "/ca.pem -CAkey ", dir,
                                 "/ca.key -CAcreateserial -days 2 -out ", base, ".pem -extfile ", ext, quiet)
                        .c_str()) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace kvt::testutil
