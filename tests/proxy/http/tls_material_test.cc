// The local CA and the server certificate it signs: made once, private,
// reused, renewed, refused when corrupt; checked by parsing the files back
// with OpenSSL and by `openssl verify`.
#include "proxy/http/tls_material.h"

#include <sys/stat.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <filesystem>
#include <memory>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

using test::TempDir;

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

X509Ptr readCert(const std::string& path) {
  auto text = readFile(path);
  if (!text.isOk()) return nullptr;
  BIO* bio = BIO_new_mem_buf(text->data(), static_cast<int>(text->size()));
  X509Ptr cert(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return cert;
}

unsigned mode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

// Whole days from now until the certificate expires.
int daysLeft(X509* cert) {
  int days = 0, seconds = 0;
  ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert));
  return days;
}

std::string readText(const std::string& path) {
  auto text = readFile(path);
  return text.isOk() ? *text : std::string();
}

test::ProcessResult opensslVerify(const std::string& dir) {
  return test::runProcess({"/usr/bin/openssl", "verify", "-purpose", "sslserver", "-CAfile", dir + "/ca.crt",
                           dir + "/server.crt"},
                          "");
}

TlsMaterialOptions optionsFor(const TempDir& tmp) {
  TlsMaterialOptions o;
  o.dir = tmp.path() + "/tls";
  return o;
}

TEST(TlsMaterialTest, FirstStartMakesACaAndAServerCertItSigns) {
  TempDir tmp;
  const TlsMaterialOptions o = optionsFor(tmp);
  auto m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_TRUE(m->created_ca);
  EXPECT_TRUE(m->issued_server_cert);
  EXPECT_EQ(m->ca_cert_path, o.dir + "/ca.crt");
  EXPECT_EQ(mode(o.dir), 0700u);
  EXPECT_EQ(mode(o.dir + "/ca.key"), 0600u);
  EXPECT_EQ(mode(o.dir + "/server.key"), 0600u);
  EXPECT_EQ(mode(o.dir + "/ca.crt"), 0644u);
  EXPECT_EQ(readText(o.dir + "/server.crt"), m->cert_chain_pem);

  // The CA: CA:TRUE, may sign certificates, ~10 years, EC P-256.
  X509Ptr ca = readCert(o.dir + "/ca.crt");
  ASSERT_TRUE(ca);
  EXPECT_GE(X509_check_ca(ca.get()), 1);
  EXPECT_TRUE(X509_get_extension_flags(ca.get()) & EXFLAG_CA);
  EXPECT_TRUE(X509_get_key_usage(ca.get()) & KU_KEY_CERT_SIGN);
  EXPECT_NEAR(daysLeft(ca.get()), 3650, 1);
  EVP_PKEY* ca_key = X509_get0_pubkey(ca.get());
  ASSERT_NE(ca_key, nullptr);
  EXPECT_EQ(EVP_PKEY_get_base_id(ca_key), EVP_PKEY_EC);

  // The server certificate: not a CA, digitalSignature, serverAuth, the
  // loopback names, ~1 year, EC P-256, issued by the CA.
  X509Ptr server = readCert(o.dir + "/server.crt");
  ASSERT_TRUE(server);
  EXPECT_EQ(X509_check_ca(server.get()), 0);
  EXPECT_FALSE(X509_get_extension_flags(server.get()) & EXFLAG_CA);
  EXPECT_TRUE(X509_get_key_usage(server.get()) & KU_DIGITAL_SIGNATURE);
  EXPECT_FALSE(X509_get_key_usage(server.get()) & KU_KEY_CERT_SIGN);
  EXPECT_TRUE(X509_get_extended_key_usage(server.get()) & XKU_SSL_SERVER);
  EXPECT_EQ(X509_check_host(server.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(server.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(server.get(), "::1", 0), 1);
  EXPECT_NE(X509_check_host(server.get(), "example.com", 0, 0, nullptr), 1);
  EXPECT_NEAR(daysLeft(server.get()), 365, 1);
  EVP_PKEY* server_key = X509_get0_pubkey(server.get());
  ASSERT_NE(server_key, nullptr);
  char group[64] = {};
  size_t group_len = 0;
  ASSERT_EQ(EVP_PKEY_get_group_name(server_key, group, sizeof group, &group_len), 1);
  EXPECT_STREQ(group, "prime256v1");
  EXPECT_EQ(X509_check_issued(ca.get(), server.get()), X509_V_OK);
  EXPECT_EQ(X509_verify(server.get(), ca_key), 1);

  const auto verify = opensslVerify(o.dir);
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_NE(verify.out.find(": OK"), std::string::npos) << verify.out;
}

TEST(TlsMaterialTest, LaterStartsReuseBoth) {
  TempDir tmp;
  const TlsMaterialOptions o = optionsFor(tmp);
  auto first = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  const std::string ca = readText(o.dir + "/ca.crt");
  auto again = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_FALSE(again->created_ca);
  EXPECT_FALSE(again->issued_server_cert) << again->issue_reason;
  EXPECT_EQ(again->cert_chain_pem, first->cert_chain_pem);
  EXPECT_EQ(again->key_pem, first->key_pem);
  EXPECT_EQ(readText(o.dir + "/ca.crt"), ca);
}

TEST(TlsMaterialTest, AnAboutToExpireServerCertIsRenewedBySameCa) {
  TempDir tmp;
  TlsMaterialOptions o = optionsFor(tmp);
  o.server_days = 10;  // within the 30-day renewal window
  ASSERT_TRUE(loadOrCreateTlsMaterial(o).isOk());
  const std::string ca = readText(o.dir + "/ca.crt");
  const std::string old_cert = readText(o.dir + "/server.crt");

  o.server_days = 365;
  auto renewed = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(renewed.isOk()) << renewed.status().toString();
  EXPECT_TRUE(renewed->issued_server_cert);
  EXPECT_FALSE(renewed->created_ca);
  EXPECT_NE(renewed->issue_reason.find("expires"), std::string::npos) << renewed->issue_reason;
  EXPECT_NE(readText(o.dir + "/server.crt"), old_cert);
  EXPECT_EQ(readText(o.dir + "/ca.crt"), ca);
  X509Ptr server = readCert(o.dir + "/server.crt");
  ASSERT_TRUE(server);
  EXPECT_NEAR(daysLeft(server.get()), 365, 1);
  const auto verify = opensslVerify(o.dir);
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;

  // Renewed once: the next start reuses it.
  auto again = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(again.isOk());
  EXPECT_FALSE(again->issued_server_cert) << again->issue_reason;
}

TEST(TlsMaterialTest, AServerCertFromAnotherCaIsIssuedAgain) {
  TempDir a, b;
  ASSERT_TRUE(loadOrCreateTlsMaterial(optionsFor(a)).isOk());
  ASSERT_TRUE(loadOrCreateTlsMaterial(optionsFor(b)).isOk());
  for (const char* f : {"/server.crt", "/server.key"}) {
    std::filesystem::copy_file(b.path() + "/tls" + f, a.path() + "/tls" + f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  auto m = loadOrCreateTlsMaterial(optionsFor(a));
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_TRUE(m->issued_server_cert);
  EXPECT_NE(m->issue_reason.find("not signed by the local CA"), std::string::npos) << m->issue_reason;
  EXPECT_EQ(opensslVerify(a.path() + "/tls").exit_code, 0);
}

TEST(TlsMaterialTest, ACorruptCaIsAnErrorNamingTheFileAndIsNeverReplaced) {
  TempDir tmp;
  const TlsMaterialOptions o = optionsFor(tmp);
  ASSERT_TRUE(loadOrCreateTlsMaterial(o).isOk());
  const std::string ca_crt = o.dir + "/ca.crt", ca_key = o.dir + "/ca.key";
  const std::string good_crt = readText(ca_crt), good_key = readText(ca_key);

  ASSERT_TRUE(writeFileAtomic(ca_crt, "-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n").isOk());
  auto bad = loadOrCreateTlsMaterial(o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find(ca_crt), std::string::npos) << bad.status().message();
  EXPECT_NE(readText(ca_crt), good_crt);  // left as it was: for the operator to look at
  ASSERT_TRUE(writeFileAtomic(ca_crt, good_crt).isOk());

  ASSERT_TRUE(writeFileAtomic(ca_key, "not a key", 0600).isOk());
  bad = loadOrCreateTlsMaterial(o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find(ca_key), std::string::npos) << bad.status().message();

  // Another CA's key beside this ca.crt.
  TempDir other;
  ASSERT_TRUE(loadOrCreateTlsMaterial(optionsFor(other)).isOk());
  ASSERT_TRUE(writeFileAtomic(ca_key, readText(other.path() + "/tls/ca.key"), 0600).isOk());
  bad = loadOrCreateTlsMaterial(o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("is not the key of"), std::string::npos) << bad.status().message();

  // Readable by others: refused.
  ASSERT_TRUE(writeFileAtomic(ca_key, good_key, 0644).isOk());
  bad = loadOrCreateTlsMaterial(o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(bad.status().message().find("0644"), std::string::npos) << bad.status().message();
  ASSERT_EQ(::chmod(ca_key.c_str(), 0600), 0);

  // ca.crt without its key: an error, not a new CA.
  ASSERT_EQ(::unlink(ca_key.c_str()), 0);
  bad = loadOrCreateTlsMaterial(o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find(ca_key), std::string::npos) << bad.status().message();
  EXPECT_EQ(readText(ca_crt), good_crt);

  // Restored, everything works again with the same CA.
  ASSERT_TRUE(writeFileAtomic(ca_key, good_key, 0600).isOk());
  auto ok = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  EXPECT_FALSE(ok->created_ca);
  EXPECT_EQ(readText(ca_crt), good_crt);
}

TEST(TlsMaterialTest, ACorruptServerPairIsIssuedAgainFromTheCa) {
  TempDir tmp;
  const TlsMaterialOptions o = optionsFor(tmp);
  ASSERT_TRUE(loadOrCreateTlsMaterial(o).isOk());
  const std::string ca = readText(o.dir + "/ca.crt");
  for (const char* file : {"/server.crt", "/server.key"}) {
    ASSERT_TRUE(writeFileAtomic(o.dir + file, "corrupt", 0600).isOk());
    auto m = loadOrCreateTlsMaterial(o);
    ASSERT_TRUE(m.isOk()) << m.status().toString();
    EXPECT_TRUE(m->issued_server_cert) << file;
    EXPECT_FALSE(m->created_ca);
    EXPECT_EQ(readText(o.dir + "/ca.crt"), ca);
    EXPECT_EQ(opensslVerify(o.dir).exit_code, 0);
  }
  // A server key others may read is replaced too (it may have leaked).
  ASSERT_EQ(::chmod((o.dir + "/server.key").c_str(), 0644), 0);
  auto m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_TRUE(m->issued_server_cert);
  EXPECT_EQ(mode(o.dir + "/server.key"), 0600u);
}

TEST(TlsMaterialTest, ACaKeyWithoutItsCertificateGetsOneIssued) {
  TempDir tmp;
  const TlsMaterialOptions o = optionsFor(tmp);
  ASSERT_TRUE(loadOrCreateTlsMaterial(o).isOk());
  const std::string key = readText(o.dir + "/ca.key");
  ASSERT_EQ(::unlink((o.dir + "/ca.crt").c_str()), 0);  // as a crash between the two writes leaves it
  auto m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_TRUE(m->created_ca);
  EXPECT_TRUE(m->issued_server_cert);
  EXPECT_EQ(readText(o.dir + "/ca.key"), key);
  EXPECT_EQ(opensslVerify(o.dir).exit_code, 0);
}

TEST(TlsMaterialTest, ExtraNamesAreCoveredAndChangingThemIssuesAgain) {
  TempDir tmp;
  TlsMaterialOptions o = optionsFor(tmp);
  o.extra_names = {"gateway.internal", "10.1.2.3", "fd00::7"};
  auto m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  X509Ptr server = readCert(o.dir + "/server.crt");
  ASSERT_TRUE(server);
  EXPECT_EQ(X509_check_host(server.get(), "gateway.internal", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(server.get(), "10.1.2.3", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(server.get(), "fd00::7", 0), 1);
  EXPECT_EQ(X509_check_host(server.get(), "localhost", 0, 0, nullptr), 1);

  o.extra_names = {"10.1.2.3", "gateway.internal", "fd00:0::7"};  // the same set, spelled otherwise
  m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk());
  EXPECT_FALSE(m->issued_server_cert) << m->issue_reason;

  o.extra_names.clear();
  m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk());
  EXPECT_TRUE(m->issued_server_cert);
  EXPECT_NE(m->issue_reason.find("names other hosts"), std::string::npos) << m->issue_reason;

  o.extra_names = {"bad name,with comma"};
  EXPECT_FALSE(loadOrCreateTlsMaterial(o).isOk());
}

TEST(TlsMaterialTest, AConfiguredPairIsLoadedAndChecked) {
  TempDir gen, tmp;
  ASSERT_TRUE(loadOrCreateTlsMaterial(optionsFor(gen)).isOk());
  const std::string dir = gen.path() + "/tls";
  TlsMaterialOptions o;
  o.cert_file = dir + "/server.crt";
  o.key_file = dir + "/server.key";
  auto m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_EQ(m->cert_chain_pem, readText(o.cert_file));
  EXPECT_TRUE(m->ca_cert_path.empty());
  EXPECT_FALSE(m->issued_server_cert);

  // A chain (leaf then CA) keeps both certificates, in order.
  ASSERT_TRUE(writeFileAtomic(tmp.file("chain.pem"), readText(o.cert_file) + readText(dir + "/ca.crt")).isOk());
  o.cert_file = tmp.file("chain.pem");
  m = loadOrCreateTlsMaterial(o);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_EQ(m->cert_chain_pem, readText(tmp.file("chain.pem")));

  o.key_file = dir + "/ca.key";  // not the leaf's key
  auto bad = loadOrCreateTlsMaterial(o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("server.tls_key"), std::string::npos) << bad.status().message();

  o.key_file = tmp.file("missing.key");
  bad = loadOrCreateTlsMaterial(o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("missing.key"), std::string::npos) << bad.status().message();

  o.key_file.clear();
  EXPECT_FALSE(loadOrCreateTlsMaterial(o).isOk());  // one without the other
}

}  // namespace
}  // namespace lg::proxy
