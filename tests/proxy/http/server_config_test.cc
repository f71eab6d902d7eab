// The server from a Config: listen addresses, TLS material under data_dir,
// limits and timeouts; then a real request to the server it builds.
#include "proxy/http/server_config.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "proxy/http/health_routes.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

TEST(ServerConfigTest, ListenAddresses) {
  auto v4 = parseListenAddress("127.0.0.1:8443");
  ASSERT_TRUE(v4.isOk());
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 8443);
  auto v6 = parseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.isOk());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_FALSE(parseListenAddress("8443").isOk());
  EXPECT_FALSE(parseListenAddress("host:65536").isOk());
}

TEST(ServerConfigTest, TheListenHostIsNamedInTheCertificate) {
  Config c;
  c.server.listen = "10.0.0.5:8443";
  EXPECT_EQ(tlsMaterialOptions(c).extra_names, std::vector<std::string>{"10.0.0.5"});
  c.server.listen = "localhost:8443";
  EXPECT_TRUE(tlsMaterialOptions(c).extra_names.empty());
  c.server.listen = "0.0.0.0:8443";
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(tlsMaterialOptions(c).extra_names, std::vector<std::string>{host});
}

TEST(ServerConfigTest, AServerBuiltFromTheConfigServesHttps) {
  test::TempDir tmp;
  Config c;
  c.data_dir = tmp.path() + "/data";
  c.server.listen = "127.0.0.1:0";
  c.server.max_body_bytes = 4096;
  c.server.idle_timeout_ms = 1234;
  TlsMaterial tls;
  auto options = loadHttpServerOptions(c, &tls);
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(tls.ca_cert_path, c.data_dir + "/tls/ca.crt");
  EXPECT_EQ(options->limits.max_body_bytes, 4096u);
  EXPECT_EQ(options->idle_timeout.count(), 1234);
  EXPECT_FALSE(options->plain_http);

  Router router;
  addHealthRoutes(router, [] { return Readiness{true, ""}; });
  auto server = HttpServer::start(*options, router.handler());
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  auto r = test::runProcess({"/usr/bin/curl", "-sS", "--max-time", "20", "--cacert", tls.ca_cert_path,
                             "https://localhost:" + std::to_string((*server)->port()) + "/readyz"},
                            "");
  EXPECT_EQ(r.out, "{\"status\":\"ready\"}") << r.err;

  // Plain HTTP needs no material.
  c.server.plain_http = true;
  auto plain = loadHttpServerOptions(c);
  ASSERT_TRUE(plain.isOk());
  EXPECT_TRUE(plain->plain_http);
  EXPECT_TRUE(plain->key_pem.empty());
}

}  // namespace
}  // namespace lg::proxy
