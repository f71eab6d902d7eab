// The typed configuration of one LatentGate process.
//
// Each module reads only its own struct, passed by const reference; nothing
// below cli/ reads the environment or files for configuration. config.h parses
// and validates these from a file, environment variables and flags.
// Defaults are the embedded mode: everything under ./data, a demo model.
#pragma once

#include <cstdint>
#include <string>

#include "common/logging.h"

namespace lg {

struct ServerOptions {
  std::string listen = "127.0.0.1:8443";  // HOST:PORT; port 0 picks a free port
  std::string tls_cert;                   // PEM; empty: self-signed under data_dir/tls
  std::string tls_key;
  int io_threads = 2;
};

struct EngineOptions {
  std::string model_dir;  // empty: the demo model under data_dir/models/demo
  int threads = 0;        // 0: one per hardware thread
  int max_context = 0;    // 0: the model's max_position_embeddings
};

struct CacheOptions {
  int block_tokens = 64;  // fingerprint block = latent page size, in tokens
};

struct Config {
  std::string data_dir = "./data";
  LogOptions log;
  ServerOptions server;
  EngineOptions engine;
  CacheOptions cache;
};

}  // namespace lg
