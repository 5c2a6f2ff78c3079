#include "server/security/tls.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/file_stamp.h"

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

// The PEM text of a listener's TLS files, checked.
struct TlsPem {
  std::string cert, key, client_ca;  // client_ca empty: no client certificates.
};

absl::StatusOr<TlsPem> ReadTlsPem(const TlsFiles& files) {
  TlsPem pem;
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
  if (!files.client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFile("--tls-client-ca", files.client_ca);
    if (!ca.ok()) return ca.status();
    if (FirstCertificate(*ca) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--tls-client-ca: ", files.client_ca,
                                                     " holds no PEM certificate"));
    }
    pem.client_ca = *std::move(ca);
  }
  pem.cert = *std::move(cert);
  pem.key = *std::move(key);
  return pem;
}

using TlsStamps = std::array<FileStamp, 3>;

TlsStamps StampsOf(const TlsFiles& files) {
  return {StampOf(files.cert), StampOf(files.key), StampOf(files.client_ca)};
}

}  // namespace

// The listener's TLS files as gRPC's SSL server credentials fetch them: at start-up
// and at each handshake after (tls.h says why and what a bad change does).
class CertificateFiles {
 public:
  // The files as checked now; fails as start-up should.
  static absl::StatusOr<std::unique_ptr<CertificateFiles>> Read(const TlsFiles& files) {
    // Stamped before reading: a change made while they are read is seen next time.
    const TlsStamps stamps = StampsOf(files);
    absl::StatusOr<TlsPem> pem = ReadTlsPem(files);
    if (!pem.ok()) return pem.status();
    return std::unique_ptr<CertificateFiles>(
        new CertificateFiles(files, *std::move(pem), stamps));
  }

  grpc_ssl_client_certificate_request_type client_request() const {
    return files_.client_ca.empty()
               ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
               : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }

  // grpc_ssl_server_certificate_config_callback: the first call (gRPC's, when the
  // listener starts) and every call after a change that passes the checks give a
  // new config (the caller owns it); otherwise UNCHANGED.
  static grpc_ssl_certificate_config_reload_status Fetch(
      void* self, grpc_ssl_server_certificate_config** config) {
    return static_cast<CertificateFiles*>(self)->Fetch(config);
  }

 private:
  CertificateFiles(TlsFiles files, TlsPem pem, TlsStamps stamps)
      : files_(std::move(files)), pem_(std::move(pem)), stamps_(stamps) {}

  grpc_ssl_certificate_config_reload_status Fetch(
      grpc_ssl_server_certificate_config** config) {
    absl::MutexLock lock(&mu_);
    if (fetched_) {
      const TlsStamps stamps = StampsOf(files_);
      if (stamps == stamps_) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
      // Noted before reading, so a change that fails is reported once, not at every
      // handshake until the files change again.
      stamps_ = stamps;
      absl::StatusOr<TlsPem> pem = ReadTlsPem(files_);
      if (!pem.ok()) {
        std::fprintf(stderr,
                     "layerserve: the TLS files changed but cannot be used: %s; new "
                     "connections still get the certificate read before\n",
                     std::string(pem.status().message()).c_str());
        return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
      }
      pem_ = *std::move(pem);
      std::fprintf(stderr, "layerserve: TLS certificate read again from %s\n",
                   files_.cert.c_str());
    }
    fetched_ = true;
    // gRPC copies the PEM text. It asserts that a fetched config has root
    // certificates even when no client certificate is asked for (gRPC 1.51,
    // ssl_security_connector.cc); then none is ever verified against them, so the
    // server's own certificate stands in.
    const grpc_ssl_pem_key_cert_pair pair = {pem_.key.c_str(), pem_.cert.c_str()};
    *config = grpc_ssl_server_certificate_config_create(
        pem_.client_ca.empty() ? pem_.cert.c_str() : pem_.client_ca.c_str(), &pair, 1);
    return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
  }

  const TlsFiles files_;
  absl::Mutex mu_;  // gRPC may shake hands on several threads at once.
  TlsPem pem_ ABSL_GUARDED_BY(mu_);
  TlsStamps stamps_ ABSL_GUARDED_BY(mu_);
  bool fetched_ ABSL_GUARDED_BY(mu_) = false;
};

ListenerSecurity::ListenerSecurity() = default;
ListenerSecurity::ListenerSecurity(ListenerSecurity&&) = default;
ListenerSecurity& ListenerSecurity::operator=(ListenerSecurity&&) = default;
ListenerSecurity::~ListenerSecurity() = default;

absl::StatusOr<ListenerSecurity> ListenerCredentials(
    const TlsFiles& files, const TokenAuthenticator* authenticator) {
  if (files.cert.empty() && !files.key.empty()) {
    return absl::InvalidArgumentError("--tls-key needs --tls-cert");
  }
  if (files.cert.empty() && !files.client_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)");
  }
  if (!files.cert.empty() && files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert needs --tls-key");
  }
  ListenerSecurity security;
  if (files.cert.empty() && authenticator == nullptr) {
    security.credentials = grpc::InsecureServerCredentials();
    return security;
  }
  grpc_server_credentials* credentials = nullptr;
  if (files.cert.empty()) {
    credentials = grpc_insecure_server_credentials_create();
  } else {
    absl::StatusOr<std::unique_ptr<CertificateFiles>> certificates =
        CertificateFiles::Read(files);
    if (!certificates.ok()) return certificates.status();
    security.certificates = *std::move(certificates);
    credentials = grpc_ssl_server_credentials_create_with_options(
        grpc_ssl_server_credentials_create_options_using_config_fetcher(
            security.certificates->client_request(), &CertificateFiles::Fetch,
            security.certificates.get()));
  }
  if (authenticator != nullptr) {
    grpc_server_credentials_set_auth_metadata_processor(credentials,
                                                        authenticator->AuthProcessor());
  }
  security.credentials = std::make_shared<CoreServerCredentials>(credentials);
  return security;
}

}  // namespace layerserve
