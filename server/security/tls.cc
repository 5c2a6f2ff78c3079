#include "server/security/tls.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace layerserve {
namespace {

// gRPC core credentials as C++ ServerCredentials. grpc++ cannot attach an auth
// processor to its plaintext credentials (InsecureServerCredentials() asserts), but
// core's plaintext credentials take one like its TLS ones do; building both in core
// gives the token check one code path for both. Owns `credentials`.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit CoreServerCredentials(grpc_server_credentials* credentials)
      : credentials_(credentials) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(credentials_); }

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    // Not used: ListenerCredentials attaches the core processor itself.
  }

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    return grpc_server_add_http2_port(server, address.c_str(), credentials_);
  }

  grpc_server_credentials* const credentials_;
};

absl::StatusOr<std::string> ReadFile(const char* flag, const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  if (!file || !(text << file.rdbuf())) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  }
  return text.str();
}

// OpenSSL objects from PEM text; null when there is none. gRPC would only say
// "Invalid private key" when the listener fails to open: these let start-up name the
// flag and the file instead.
struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Deleter {
  void operator()(X509* x509) const { X509_free(x509); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

std::unique_ptr<BIO, BioDeleter> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioDeleter>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

std::unique_ptr<X509, X509Deleter> FirstCertificate(const std::string& pem) {
  auto bio = MemoryBio(pem);
  return std::unique_ptr<X509, X509Deleter>(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

std::unique_ptr<EVP_PKEY, KeyDeleter> PrivateKey(const std::string& pem) {
  auto bio = MemoryBio(pem);
  // A passphrase callback that gives none: an encrypted key fails here instead of
  // OpenSSL prompting on the terminal.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  return std::unique_ptr<EVP_PKEY, KeyDeleter>(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
}

absl::StatusOr<grpc_server_credentials*> TlsCredentials(const TlsFiles& files) {
  if (files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert needs --tls-key");
  }
  absl::StatusOr<std::string> cert = ReadFile("--tls-cert", files.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile("--tls-key", files.key);
  if (!key.ok()) return key.status();
  auto x509 = FirstCertificate(*cert);
  if (x509 == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert: ", files.cert, " holds no PEM certificate"));
  }
  auto private_key = PrivateKey(*key);
  if (private_key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key: ", files.key, " holds no unencrypted PEM private key"));
  }
  if (X509_check_private_key(x509.get(), private_key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key: ", files.key, " is not the key of the certificate in ", files.cert));
  }
  std::string client_ca;
  if (!files.client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFile("--tls-client-ca", files.client_ca);
    if (!ca.ok()) return ca.status();
    if (FirstCertificate(*ca) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-client-ca: ", files.client_ca,
                                                     " holds no PEM certificate"));
    }
    client_ca = *std::move(ca);
  }
  // gRPC copies the PEM text.
  grpc_ssl_pem_key_cert_pair pair = {key->c_str(), cert->c_str()};
  return grpc_ssl_server_credentials_create_ex(
      client_ca.empty() ? nullptr : client_ca.c_str(), &pair, 1,
      client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                        : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
      nullptr);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
    const TlsFiles& files, const TokenAuthenticator* authenticator) {
  if (files.cert.empty() && !files.key.empty()) {
    return absl::InvalidArgumentError("--tls-key needs --tls-cert");
  }
  if (files.cert.empty() && !files.client_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
  }
  if (files.cert.empty() && authenticator == nullptr) {
    return grpc::InsecureServerCredentials();
  }
  grpc_server_credentials* credentials = nullptr;
  if (files.cert.empty()) {
    credentials = grpc_insecure_server_credentials_create();
  } else {
    absl::StatusOr<grpc_server_credentials*> tls = TlsCredentials(files);
    if (!tls.ok()) return tls.status();
    credentials = *tls;
  }
  if (authenticator != nullptr) {
    grpc_server_credentials_set_auth_metadata_processor(credentials,
                                                        authenticator->AuthProcessor());
  }
  return std::make_shared<CoreServerCredentials>(credentials);
}

}  // namespace layerserve
