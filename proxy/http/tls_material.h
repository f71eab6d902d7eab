// TLS material for the HTTPS listener: the certificate chain and private key
// it serves, either the operator's (server.tls_cert / server.tls_key) or, by
// default, made and kept under data_dir/tls:
//
//   ca.crt, ca.key          a local certificate authority (EC P-256, CA:TRUE,
//                           keyCertSign, ~10 years): ca.crt is what clients trust
//   server.crt, server.key  the server's certificate, signed by that CA
//                           (EC P-256, CA:FALSE, digitalSignature, serverAuth,
//                           SAN localhost, 127.0.0.1, ::1 and the listen host,
//                           ~1 year)
//
// The CA is separate from the server certificate because rustls clients (the
// Codex CLI) refuse a certificate that is both the trust anchor and the
// server's own. Private keys are written atomically with mode 0600 in a 0700
// directory. Later starts reuse both; the server pair is issued again (new key,
// same CA) when it is missing, unreadable, expires within
// `renew_within_days`, was not signed by the CA, or names other hosts. The CA
// is never replaced silently: a corrupt, mismatched, expired or too readable
// ca.crt / ca.key is an error that names the file, since a new CA would make
// every client's trusted ca.crt useless. (A ca.key without its ca.crt, which
// a crash during the first start leaves, gets a ca.crt issued from it.)
//
// Thread-safety: a plain function; concurrent starts on one data dir (two
// processes) are serialized by a lock file in the directory.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace lg::proxy {

struct TlsMaterialOptions {
  std::string dir;        // where the generated material lives (data_dir/tls)
  std::string cert_file;  // an operator's PEM chain (leaf first); with key_file, used instead of generating
  std::string key_file;
  // Names the server certificate covers beyond localhost, 127.0.0.1 and ::1:
  // DNS names or IP addresses (the listen host when it is a specific one).
  std::vector<std::string> extra_names;
  int ca_days = 3650;
  int server_days = 365;
  int renew_within_days = 30;
};

struct TlsMaterial {
  std::string cert_chain_pem;  // the server certificate, then any intermediates
  std::string key_pem;         // its private key: a secret, never logged
  std::string cert_path;       // where they came from
  std::string key_path;
  std::string ca_cert_path;    // the generated CA clients trust; empty for configured material
  bool created_ca = false;           // this call made a new CA
  bool issued_server_cert = false;   // this call issued a new server certificate
  std::string issue_reason;          // why it did (for logs and tests)
};

// Loads the configured pair, or loads (creating or renewing what is needed)
// the generated one. Errors name the file at fault.
Result<TlsMaterial> loadOrCreateTlsMaterial(const TlsMaterialOptions& options);

}  // namespace lg::proxy
