#include "proxy/http/tls_material.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>

#include "common/file_util.h"
#include "proxy/http/proxy_log.h"

namespace lg::proxy {
namespace {

struct OpenSslFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_NAME* p) const { X509_NAME_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
  void operator()(ASN1_TIME* p) const { ASN1_TIME_free(p); }
};
template <typename T>
using Ptr = std::unique_ptr<T, OpenSslFree>;

constexpr size_t kMaxPemBytes = size_t{1} << 20;

// OpenSSL's queued error reasons, oldest first; clears the queue.
std::string opensslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// Refuses encrypted keys instead of letting OpenSSL prompt on the terminal.
int noPassword(char*, int, int, void*) { return 0; }

std::string bioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

std::string timeText(const ASN1_TIME* t) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || ASN1_TIME_print(bio.get(), t) != 1) return "?";
  return bioText(bio.get());
}

std::string certPem(X509* cert) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return {};
  return bioText(bio.get());
}

std::string keyPem(EVP_PKEY* key) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) return {};
  return bioText(bio.get());
}

// Every certificate in a PEM text, in order.
std::vector<Ptr<X509>> parseCerts(const std::string& pem) {
  std::vector<Ptr<X509>> out;
  Ptr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (bio) {
    Ptr<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, noPassword, nullptr));
    if (!cert) break;
    out.push_back(std::move(cert));
  }
  ERR_clear_error();  // the read that found no further certificate queued an error
  return out;
}

Ptr<EVP_PKEY> parseKey(const std::string& pem) {
  Ptr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Ptr<EVP_PKEY> key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, noPassword, nullptr) : nullptr);
  ERR_clear_error();
  return key;
}

std::string modeText(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 0777));
  return buf;
}

// The permission bits of `path`, or -1 when it cannot be stat'ed.
int fileMode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 0777);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// "DNS:name" or "IP:address" (an address in its canonical text form).
Result<std::string> sanEntry(const std::string& name) {
  unsigned char addr[16];
  char text[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, name.c_str(), addr) == 1) {
    return "IP:" + std::string(inet_ntop(AF_INET, addr, text, sizeof text));
  }
  if (inet_pton(AF_INET6, name.c_str(), addr) == 1) {
    return "IP:" + std::string(inet_ntop(AF_INET6, addr, text, sizeof text));
  }
  const bool valid = !name.empty() && name.size() <= 253 &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                              c == '-' || c == '.';
                     });
  if (!valid) return invalidArgument("'" + name + "' is neither an IP address nor a DNS name");
  return "DNS:" + name;
}

Result<std::vector<std::string>> expectedSans(const TlsMaterialOptions& options) {
  std::vector<std::string> out = {"DNS:localhost", "IP:127.0.0.1", "IP:::1"};
  for (const std::string& name : options.extra_names) {
    LG_ASSIGN_OR_RETURN(std::string entry, sanEntry(name));
    if (std::find(out.begin(), out.end(), entry) == out.end()) out.push_back(entry);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The certificate's subjectAltName entries, in sanEntry's form, sorted.
std::vector<std::string> certSans(X509* cert) {
  std::vector<std::string> out;
  Ptr<GENERAL_NAMES> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type == GEN_DNS) {
      const ASN1_STRING* s = n->d.dNSName;
      out.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                         static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (n->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = n->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = "?";
      const int len = ASN1_STRING_length(s);
      if (len == 4 || len == 16) inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), text, sizeof text);
      out.push_back("IP:" + std::string(text));
    } else {
      out.push_back("other");
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status addExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  Ptr<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return internalError("cannot add certificate extension " + std::string(OBJ_nid2sn(nid)) + " = " + value + ": " +
                         opensslErrors());
  }
  return Status::ok();
}

Result<Ptr<EVP_PKEY>> newKey() {
  Ptr<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return unavailable("cannot generate an EC P-256 key: " + opensslErrors());
  return key;
}

struct CertSpec {
  std::string common_name;
  int days = 365;
  bool ca = false;
  std::vector<std::string> sans;  // server certificates only
};

// A certificate for `key`, signed by `issuer_key` (and named after `issuer`),
// or self-signed when `issuer` is null.
Result<Ptr<X509>> makeCert(const CertSpec& spec, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key) {
  Ptr<X509> cert(X509_new());
  if (!cert) return internalError("X509_new: " + opensslErrors());
  // 159 random bits: unique per certificate, positive, within RFC 5280's 20 octets.
  unsigned char serial[20];
  if (RAND_bytes(serial, sizeof serial) != 1) return unavailable("no randomness for a certificate serial");
  serial[0] &= 0x7f;
  serial[0] |= 0x01;  // no leading zero octet, so the DER length is stable
  Ptr<BIGNUM> bn(BN_bin2bn(serial, sizeof serial, nullptr));
  time_t now = std::time(nullptr);
  bool ok = bn && X509_set_version(cert.get(), X509_VERSION_3) == 1 &&
            BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) != nullptr &&
            // An hour back, so a client whose clock is a little behind accepts it.
            X509_time_adj_ex(X509_getm_notBefore(cert.get()), 0, -3600, &now) != nullptr &&
            X509_time_adj_ex(X509_getm_notAfter(cert.get()), spec.days, 0, &now) != nullptr &&
            X509_set_pubkey(cert.get(), key) == 1;
  Ptr<X509_NAME> name(X509_NAME_new());
  ok = ok && name &&
       X509_NAME_add_entry_by_txt(name.get(), "O", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>("LatentGate"), -1, -1, 0) == 1 &&
       X509_NAME_add_entry_by_txt(name.get(), "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1, -1, 0) == 1 &&
       X509_set_subject_name(cert.get(), name.get()) == 1 &&
       X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name.get()) == 1;
  if (!ok) return internalError("cannot fill in a certificate: " + opensslErrors());
  // A server certificate never outlives the CA that signed it.
  if (issuer && ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(issuer)) > 0 &&
      X509_set1_notAfter(cert.get(), X509_get0_notAfter(issuer)) != 1) {
    return internalError("cannot limit the certificate's validity: " + opensslErrors());
  }

  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer : cert.get(), cert.get(), nullptr, nullptr, 0);
  if (spec.ca) {
    LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
    // digitalSignature only: keyEncipherment is RSA key transport, which an
    // EC key cannot do (RFC 5480 section 3 does not allow it for EC keys).
    LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature"));
    LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_ext_key_usage, "serverAuth"));
    std::string san;
    for (const std::string& entry : spec.sans) san += (san.empty() ? "" : ",") + entry;
    LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_subject_alt_name, san));
  }
  LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  LG_RETURN_IF_ERROR(addExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) <= 0) {
    return internalError("cannot sign a certificate: " + opensslErrors());
  }
  return cert;
}

// Holds an exclusive lock on DIR/.lock for its lifetime, so that two
// processes starting on one data dir do not both make a CA.
class DirLock {
 public:
  static Result<DirLock> acquire(const std::string& dir) {
    const std::string path = dir + "/.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return unavailable("cannot open " + path + ": " + std::strerror(errno));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const std::string reason = std::strerror(errno);
      ::close(fd);
      return unavailable("cannot lock " + path + ": " + reason);
    }
    return DirLock(fd);
  }
  DirLock(DirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_;
};

struct Ca {
  Ptr<X509> cert;
  Ptr<EVP_PKEY> key;
  bool created = false;
};

std::string caCommonName() {
  // A per-installation suffix, so that two installations' CAs are told apart
  // in a trust store.
  unsigned char id[4];
  if (RAND_bytes(id, sizeof id) != 1) return "LatentGate local CA";
  char hex[9];
  std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
  return std::string("LatentGate local CA ") + hex;
}

Result<Ca> loadOrCreateCa(const TlsMaterialOptions& options) {
  const std::string crt_path = options.dir + "/ca.crt";
  const std::string key_path = options.dir + "/ca.key";
  const bool have_crt = exists(crt_path);
  const bool have_key = exists(key_path);
  Ca ca;
  if (!have_crt && !have_key) {
    LG_ASSIGN_OR_RETURN(ca.key, newKey());
    CertSpec spec{caCommonName(), options.ca_days, /*ca=*/true, {}};
    LG_ASSIGN_OR_RETURN(ca.cert, makeCert(spec, ca.key.get(), nullptr, ca.key.get()));
    // The key first: a crash before ca.crt is written leaves a key from which
    // the next start issues ca.crt, never a ca.crt without its key.
    LG_RETURN_IF_ERROR(writeFileAtomic(key_path, keyPem(ca.key.get()), 0600));
    LG_RETURN_IF_ERROR(writeFileAtomic(crt_path, certPem(ca.cert.get()), 0644));
    ca.created = true;
    proxyLog()->info("created a local certificate authority: {} (clients trust this file), valid until {}", crt_path,
                     timeText(X509_get0_notAfter(ca.cert.get())));
    return ca;
  }
  if (!have_key) {
    return notFound("TLS: " + crt_path + " exists but its key " + key_path +
                    " does not; restore the key, or remove " + crt_path +
                    " to make a new CA (clients must then trust the new ca.crt)");
  }
  const int mode = fileMode(key_path);
  if (mode < 0) return unavailable("TLS: cannot stat " + key_path + ": " + std::strerror(errno));
  if ((mode & 077) != 0) {
    return permissionDenied("TLS: " + key_path + " may be read by group or others (mode " + modeText(mode) +
                            "); make it 0600");
  }
  LG_ASSIGN_OR_RETURN(std::string key_text, readFile(key_path, kMaxPemBytes));
  ca.key = parseKey(key_text);
  if (!ca.key) return dataLoss("TLS: " + key_path + " is not a PEM private key (or is encrypted)");
  if (!have_crt) {
    CertSpec spec{caCommonName(), options.ca_days, /*ca=*/true, {}};
    LG_ASSIGN_OR_RETURN(ca.cert, makeCert(spec, ca.key.get(), nullptr, ca.key.get()));
    LG_RETURN_IF_ERROR(writeFileAtomic(crt_path, certPem(ca.cert.get()), 0644));
    ca.created = true;
    proxyLog()->warn("{} was missing: issued it again from {} (same key)", crt_path, key_path);
    return ca;
  }
  LG_ASSIGN_OR_RETURN(std::string crt_text, readFile(crt_path, kMaxPemBytes));
  std::vector<Ptr<X509>> certs = parseCerts(crt_text);
  if (certs.size() != 1) return dataLoss("TLS: " + crt_path + " is not one PEM certificate");
  ca.cert = std::move(certs[0]);
  if (X509_check_ca(ca.cert.get()) < 1) return dataLoss("TLS: " + crt_path + " is not a CA certificate");
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1) {
    ERR_clear_error();
    return dataLoss("TLS: " + key_path + " is not the key of " + crt_path);
  }
  if (X509_cmp_current_time(X509_get0_notAfter(ca.cert.get())) <= 0) {
    return invalidArgument("TLS: the local CA " + crt_path + " expired on " +
                           timeText(X509_get0_notAfter(ca.cert.get())) + "; remove " + crt_path + " and " + key_path +
                           " to make a new one (clients must then trust the new ca.crt)");
  }
  return ca;
}

// Why the server pair must be issued again; empty when it can be reused.
std::string serverCertProblem(const std::string& crt_path, const std::string& key_path, const Ca& ca,
                              const std::vector<std::string>& sans, int renew_within_days, Ptr<X509>& cert,
                              Ptr<EVP_PKEY>& key) {
  if (!exists(crt_path) || !exists(key_path)) return "first start";
  const int mode = fileMode(key_path);
  if (mode < 0 || (mode & 077) != 0) return key_path + " may be read by group or others";
  auto crt_text = readFile(crt_path, kMaxPemBytes);
  auto key_text = readFile(key_path, kMaxPemBytes);
  if (!crt_text.isOk()) return crt_text.status().message();
  if (!key_text.isOk()) return key_text.status().message();
  std::vector<Ptr<X509>> certs = parseCerts(*crt_text);
  if (certs.empty()) return crt_path + " is not a PEM certificate";
  cert = std::move(certs[0]);
  key = parseKey(*key_text);
  if (!key) return key_path + " is not a PEM private key";
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return key_path + " is not the key of " + crt_path;
  }
  Ptr<EVP_PKEY> ca_public(X509_get_pubkey(ca.cert.get()));
  if (X509_check_issued(ca.cert.get(), cert.get()) != X509_V_OK || X509_verify(cert.get(), ca_public.get()) != 1) {
    ERR_clear_error();
    return crt_path + " was not signed by the local CA";
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0) return crt_path + " is not valid yet";
  time_t renew_at = std::time(nullptr) + static_cast<time_t>(renew_within_days) * 86400;
  if (X509_cmp_time(X509_get0_notAfter(cert.get()), &renew_at) < 0) {
    return crt_path + " expires on " + timeText(X509_get0_notAfter(cert.get()));
  }
  if (certSans(cert.get()) != sans) return crt_path + " names other hosts";
  return {};
}

Result<TlsMaterial> loadGenerated(const TlsMaterialOptions& options) {
  std::error_code ec;
  if (!std::filesystem::exists(options.dir, ec)) {
    std::filesystem::create_directories(options.dir, ec);
    if (ec) return unavailable("TLS: cannot create " + options.dir + ": " + ec.message());
    ::chmod(options.dir.c_str(), 0700);  // it holds private keys
  }
  LG_ASSIGN_OR_RETURN(DirLock lock, DirLock::acquire(options.dir));
  LG_ASSIGN_OR_RETURN(Ca ca, loadOrCreateCa(options));
  LG_ASSIGN_OR_RETURN(std::vector<std::string> sans, expectedSans(options));

  TlsMaterial out;
  out.cert_path = options.dir + "/server.crt";
  out.key_path = options.dir + "/server.key";
  out.ca_cert_path = options.dir + "/ca.crt";
  out.created_ca = ca.created;
  Ptr<X509> cert;
  Ptr<EVP_PKEY> key;
  std::string problem = serverCertProblem(out.cert_path, out.key_path, ca, sans, options.renew_within_days, cert, key);
  if (ca.created && problem.empty()) problem = "a new CA";  // (a server pair left from another CA fails above anyway)
  if (!problem.empty()) {
    LG_ASSIGN_OR_RETURN(key, newKey());
    CertSpec spec{"localhost", options.server_days, /*ca=*/false, sans};
    LG_ASSIGN_OR_RETURN(cert, makeCert(spec, key.get(), ca.cert.get(), ca.key.get()));
    LG_RETURN_IF_ERROR(writeFileAtomic(out.key_path, keyPem(key.get()), 0600));
    LG_RETURN_IF_ERROR(writeFileAtomic(out.cert_path, certPem(cert.get()), 0644));
    out.issued_server_cert = true;
    out.issue_reason = problem;
    proxyLog()->info("issued the server certificate {} ({}), valid until {}", out.cert_path, problem,
                     timeText(X509_get0_notAfter(cert.get())));
  }
  out.cert_chain_pem = certPem(cert.get());
  out.key_pem = keyPem(key.get());
  if (out.cert_chain_pem.empty() || out.key_pem.empty()) return internalError("TLS: cannot encode PEM: " + opensslErrors());
  return out;
}

Result<TlsMaterial> loadConfigured(const TlsMaterialOptions& options) {
  TlsMaterial out;
  out.cert_path = options.cert_file;
  out.key_path = options.key_file;
  Result<std::string> crt_text = readFile(options.cert_file, kMaxPemBytes);
  if (!crt_text.isOk()) return crt_text.status().withContext("server.tls_cert");
  Result<std::string> key_text = readFile(options.key_file, kMaxPemBytes);
  if (!key_text.isOk()) return key_text.status().withContext("server.tls_key");
  std::vector<Ptr<X509>> certs = parseCerts(*crt_text);
  if (certs.empty()) return invalidArgument("server.tls_cert: " + options.cert_file + " holds no PEM certificate");
  Ptr<EVP_PKEY> key = parseKey(*key_text);
  if (!key) {
    return invalidArgument("server.tls_key: " + options.key_file + " is not a PEM private key (or is encrypted)");
  }
  if (X509_check_private_key(certs[0].get(), key.get()) != 1) {
    ERR_clear_error();
    return invalidArgument("server.tls_key: " + options.key_file + " is not the key of the first certificate in " +
                           options.cert_file);
  }
  const ASN1_TIME* not_after = X509_get0_notAfter(certs[0].get());
  if (X509_cmp_current_time(not_after) <= 0) {
    return invalidArgument("server.tls_cert: " + options.cert_file + " expired on " + timeText(not_after));
  }
  time_t soon = std::time(nullptr) + static_cast<time_t>(options.renew_within_days) * 86400;
  if (X509_cmp_time(not_after, &soon) < 0) {
    proxyLog()->warn("server.tls_cert {} expires on {}", options.cert_file, timeText(not_after));
  }
  const int mode = fileMode(options.key_file);
  if (mode >= 0 && (mode & 077) != 0) {
    proxyLog()->warn("server.tls_key {} may be read by group or others (mode {})", options.key_file, modeText(mode));
  }
  for (const auto& cert : certs) out.cert_chain_pem += certPem(cert.get());
  out.key_pem = keyPem(key.get());
  if (out.key_pem.empty()) return internalError("TLS: cannot encode PEM: " + opensslErrors());
  return out;
}

}  // namespace

Result<TlsMaterial> loadOrCreateTlsMaterial(const TlsMaterialOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return invalidArgument("server.tls_cert and server.tls_key: set both or neither");
  }
  if (!options.cert_file.empty()) return loadConfigured(options);
  if (options.dir.empty()) return invalidArgument("TLS: no directory for the generated certificates");
  return loadGenerated(options);
}

}  // namespace lg::proxy
