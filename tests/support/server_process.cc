#include "tests/support/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace lg::test {

int freeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = -1;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

bool postgresAccount(std::optional<RunAs>* account, std::string* error) {
  account->reset();
  if (geteuid() != 0) return true;
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r("postgres", &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    *error = "running as root, and there is no `postgres` account to run PostgreSQL as (apt-get install postgresql)";
    return false;
  }
  *account = RunAs{pw.pw_uid, pw.pw_gid};
  return true;
}

pid_t spawnLogged(const std::vector<std::string>& argv, const std::string& log_path, const std::optional<RunAs>& as,
                  std::string* error) {
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    *error = "open " + log_path + ": " + std::strerror(errno);
    return -1;
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Everything the child needs is prepared before fork: between fork and
  // exec it makes only async-signal-safe calls (this process has threads).
  std::vector<std::string> args_copy = argv;
  std::vector<char*> args;
  for (auto& a : args_copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return -1;
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group: a Ctrl-C at the terminal reaches the test, not the server
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    if (as) {
      if (setgroups(0, nullptr) != 0 || setgid(as->gid) != 0 || setuid(as->uid) != 0) _exit(126);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  return pid;
}

bool exited(pid_t pid, int* status) {
  int st = 0;
  const pid_t r = waitpid(pid, &st, WNOHANG);
  if (r == pid) {
    if (status != nullptr) *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return true;
  }
  return r < 0 && errno == ECHILD;
}

bool stopChild(pid_t pid, int signal, int grace_ms) {
  if (pid <= 0) return true;
  if (exited(pid)) return true;
  kill(pid, signal);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (exited(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return false;
}

int runLogged(const std::vector<std::string>& argv, const std::string& log_path, const std::optional<RunAs>& as,
              std::string* error) {
  const pid_t pid = spawnLogged(argv, log_path, as, error);
  if (pid < 0) return -1;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string fileTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
}

std::string makePrivateDir(const std::string& prefix) {
  // /tmp (1777), not $TMPDIR: the `postgres` account must be able to reach it.
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return {};
  return tmpl;
}

bool startServer(const ServerLaunch& launch, int* port, pid_t* pid, std::string* error) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (*port <= 0 || attempt > 0) *port = freeLoopbackPort();
    if (*port <= 0) {
      *error = "no free port";
      return false;
    }
    *pid = launch.spawn(*port, error);
    if (*pid < 0) return false;
    const auto deadline = std::chrono::steady_clock::now() + launch.timeout;
    int status = 0;
    bool died = false;
    while (std::chrono::steady_clock::now() < deadline) {
      if (launch.ready(*port)) return true;
      if (exited(*pid, &status)) {
        died = true;
        break;
      }
      std::this_thread::sleep_for(launch.poll);
    }
    if (!died) {
      stopChild(*pid, launch.stop_signal, 10'000);
      *pid = -1;
      *error = launch.name + " was not ready within " + std::to_string(launch.timeout.count() / 1000) +
               " s: " + launch.log();
      return false;
    }
    *pid = -1;
    *error = launch.name + " exited (" + std::to_string(status) + "): " + launch.log();
  }
  return false;
}

}  // namespace lg::test
