// tvmgen native RPC device server. See include/tvmgen/rpc_server.h.
//
// Wire protocol (TVM's, as its Python server and proxy speak it): every integer is int32
// little-endian; a key is sent as its length then its bytes; tracker messages are JSON sent
// as length + UTF-8 text.
#include "tvmgen/rpc_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <dirent.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "tvmgen/runtime.h"

#if defined(__APPLE__)
#include <TargetConditionals.h>
#endif
#ifndef MSG_NOSIGNAL  // Darwin: no per-call flag; sockets get SO_NOSIGPIPE instead (NoSigPipe below)
#define MSG_NOSIGNAL 0
#endif

namespace tvmgen {
namespace rpc {
namespace ffi = tvm::ffi;

namespace {

constexpr int32_t kRpcMagic = 0xFF271;
constexpr int32_t kTrackerMagic = 0x2F271;
constexpr int32_t kCodeSuccess = kRpcMagic, kCodeDuplicate = kRpcMagic + 1, kCodeMismatch = kRpcMagic + 2;
enum TrackerCode { kSuccess = 0, kPut = 3, kUpdateInfo = 5, kGetPendingMatchKeys = 7 };

struct NetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct FatalError : std::runtime_error {  // not worth retrying: wrong key, not a proxy, ...
  using std::runtime_error::runtime_error;
};

std::mutex g_log_mutex;
std::function<void(const std::string&)> g_log_sink;

void Log(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_log_mutex);
  if (g_log_sink) {
    g_log_sink(buf);
    return;
  }
  std::fprintf(stderr, "tvmgen-rpc-server[%d]: %s\n", static_cast<int>(getpid()), buf);
  std::fflush(stderr);
}

// A closed peer must give an error, not kill the process with SIGPIPE (Darwin has no MSG_NOSIGNAL).
void NoSigPipe(int fd) {
#if defined(SO_NOSIGPIPE)
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#else
  (void)fd;
#endif
}

bool StopRequested(const ServerOptions& o) { return o.stop != nullptr && o.stop->load(); }

// Wait until `fd` is readable, checking the stop flag every second; false when stopped.
bool WaitReadable(int fd, const ServerOptions& o) {
  while (!StopRequested(o)) {
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(fd, &fds);
    timeval tv{1, 0};
    int r = select(fd + 1, &fds, nullptr, nullptr, &tv);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the read report the error
  }
  return false;
}

// ------------------------------------------------------------------ sockets
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    Close();
    fd_ = o.fd_;
    o.fd_ = -1;
    return *this;
  }
  ~Socket() { Close(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void SendAll(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) throw NetError(std::string("send failed: ") + std::strerror(errno));
      p += k;
      n -= static_cast<size_t>(k);
    }
  }
  void RecvAll(void* data, size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      ssize_t k = ::recv(fd_, p, n, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k == 0) throw NetError("connection closed by the peer");
      if (k < 0) throw NetError(std::string("recv failed: ") + std::strerror(errno));
      p += k;
      n -= static_cast<size_t>(k);
    }
  }
  void SendInt(int32_t v) {
    unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
    SendAll(b, 4);
  }
  int32_t RecvInt() {
    unsigned char b[4];
    RecvAll(b, 4);
    return static_cast<int32_t>(b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24));
  }
  void SendStr(const std::string& s) {
    SendInt(static_cast<int32_t>(s.size()));
    SendAll(s.data(), s.size());
  }
  std::string RecvStr(int32_t limit) {
    int32_t n = RecvInt();
    if (n < 0 || n > limit) throw NetError("peer sent a string of " + std::to_string(n) + " bytes (limit " +
                                           std::to_string(limit) + ")");
    std::string s(static_cast<size_t>(n), '\0');
    if (n) RecvAll(&s[0], s.size());
    return s;
  }

 private:
  int fd_ = -1;
};

Socket Connect(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw NetError("cannot resolve " + host + ": " + gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
    if (!s.valid()) continue;
    if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) {
      int one = 1;
      setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      NoSigPipe(s.fd());
      freeaddrinfo(res);
      return s;
    }
    last = std::strerror(errno);
  }
  freeaddrinfo(res);
  throw NetError("cannot connect to " + host + ":" + std::to_string(port) + ": " + last);
}

Socket Listen(const std::string& host, int port_start, int port_end, int* port_out) {
  for (int port = port_start; port <= port_end; ++port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
      throw FatalError("cannot resolve the listen address " + host);
    }
    Socket s(::socket(res->ai_family, res->ai_socktype, res->ai_protocol));
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bool ok = s.valid() && ::bind(s.fd(), res->ai_addr, res->ai_addrlen) == 0 && ::listen(s.fd(), 8) == 0;
    freeaddrinfo(res);
    if (ok) {
      *port_out = port;
      return s;
    }
  }
  throw FatalError("no free port to listen on " + host + " in " + std::to_string(port_start) + "-" +
                   std::to_string(port_end));
}

// ------------------------------------------------------------------ server-side functions
std::string g_session_dir;  // uploads of the current session
int64_t g_max_upload = 0;
bool g_system_lib_only = false;
std::string g_emulator;  // empty: runs on the CPU it reports
std::vector<std::string> g_linked_models;

void RefuseUploadedCode(const std::string& what) {
  if (g_system_lib_only) {
    throw std::invalid_argument(what + " refused: this device runs only the models linked into its app (iOS cannot "
                                "load uploaded code); use remote.system_lib() instead of uploading a library");
  }
}

// A plain file name inside the session's work directory; anything else is refused.
std::string WorkPath(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
      name == "." || name == ".." || name.find("..") != std::string::npos || name.find('\0') != std::string::npos) {
    throw std::invalid_argument("refused file name \"" + name +
                                "\": uploads are plain file names inside the server's work directory");
  }
  return g_session_dir + "/" + name;
}

std::vector<std::string> AvailableDevices() {
  std::vector<std::string> out = {"cpu"};
  for (const char* dev : {"opencl", "cuda", "vulkan", "metal"}) {
    try {
      LoadBackend(dev);
      out.push_back(dev);
    } catch (const Error&) {  // not on this device
    }
  }
  return out;
}

}  // namespace

std::string DeviceInfoJson() {
  utsname u{};
  uname(&u);
  std::string arch = RuntimeArch();
#if defined(__ANDROID__)
  std::string os = "android";
  std::string abi = arch == "aarch64" ? "arm64-v8a" : arch == "arm" ? "armeabi-v7a" : arch;
  std::string platform = arch == "aarch64" ? "android-arm64" : arch == "arm" ? "android-armv7" : "android-" + arch;
#elif defined(__APPLE__) && TARGET_OS_IPHONE
  std::string os = "ios", abi = arch == "aarch64" ? "arm64" : arch, platform = "ios-arm64";
#elif defined(__APPLE__)
  std::string os = "darwin", abi = arch, platform = "host";
#else
  std::string os = "linux", abi = arch;
  std::string platform = arch == "aarch64" ? "linux-aarch64" : "host";
#endif
  std::string devices, models;
  for (const std::string& d : AvailableDevices()) devices += (devices.empty() ? "" : ", ") + JsonString(d);
  for (const std::string& m : g_linked_models) models += (models.empty() ? "" : ", ") + JsonString(m);
  return "{\"platform\": " + JsonString(platform) + ", \"os\": " + JsonString(os) +
         ", \"arch\": " + JsonString(arch) + ", \"abi\": " + JsonString(abi) + ", \"devices\": [" + devices +
         "], \"kernel\": " + JsonString(std::string(u.sysname) + " " + u.release) +
         ", \"machine\": " + JsonString(u.machine) +
         ", \"max_upload_bytes\": " + std::to_string(g_max_upload) +
         ", \"system_lib_only\": " + (g_system_lib_only ? "true" : "false") + ", \"linked_models\": [" + models +
         "], \"emulator\": " + (g_emulator.empty() ? std::string("null") : JsonString(g_emulator)) + "}";
}

void SetLogSink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_log_sink = std::move(sink);
}

void RegisterServerFunctions(const ServerOptions& options) {
  g_max_upload = options.max_upload_bytes;
  g_system_lib_only = options.system_lib_only;
  g_emulator = options.emulator;
  g_linked_models = options.linked_models;
  ffi::Function::SetGlobal("tvm.rpc.server.workpath", ffi::Function::FromTyped([](std::string name) {
    return WorkPath(name);
  }), true);
  // Replaces the runtime's own upload: the name is checked and the size bounded before writing.
  ffi::Function::SetGlobal("tvm.rpc.server.upload", ffi::Function::FromPacked([](ffi::PackedArgs args, ffi::Any*) {
    RefuseUploadedCode("upload");
    std::string path = WorkPath(args[0].cast<std::string>());
    std::string data = args[1].cast<std::string>();
    if (static_cast<int64_t>(data.size()) > g_max_upload) {
      throw std::invalid_argument("upload of " + std::to_string(data.size()) + " bytes refused: the limit is " +
                                  std::to_string(g_max_upload) + " bytes (--max-upload-mb)");
    }
    std::ofstream f(path, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
    Log("upload %s (%zu bytes)", path.c_str(), data.size());
  }), true);
  ffi::Function::SetGlobal("tvm.rpc.server.load_module", ffi::Function::FromTyped([](std::string name) {
    RefuseUploadedCode("loading " + name);
    std::string path = WorkPath(name);
    std::string arch = LibraryArch(path);
    if (arch != "not-elf" && arch != "unreadable" && arch != RuntimeArch()) {
      throw std::invalid_argument("the library " + name + " is built for " + arch + ", this device is " +
                                  RuntimeArch() + ": compile it for this device's platform");
    }
    Log("load module %s", path.c_str());
    return ffi::Module::LoadFromFile(path);
  }), true);
  ffi::Function::SetGlobal("tvmgen.device_info", ffi::Function::FromTyped([]() { return DeviceInfoJson(); }), true);
}

namespace {

std::string SessionOptionsTimeout(const std::string& remote_key, int limit) {
  // The client may ask for a shorter session: "client:KEY -timeout=N".
  size_t p = remote_key.find("-timeout=");
  if (p == std::string::npos) return std::to_string(limit);
  int asked = std::atoi(remote_key.c_str() + p + 9);
  return std::to_string(asked > 0 ? std::min(asked, limit) : limit);
}

// Serve one session on `sock`; returns when it ends (or is ended at its time limit).
void ServeSession(Socket sock, const ServerOptions& o, const std::string& remote_key, int session_no) {
  int timeout = std::stoi(SessionOptionsTimeout(remote_key, o.session_timeout_s));
  std::string dir = o.work_dir + "/session-" + std::to_string(session_no);
  ::mkdir(dir.c_str(), 0700);
  Log("session %d: %s (limit %d s, work dir %s)", session_no, remote_key.c_str(), timeout, dir.c_str());
  auto start = std::chrono::steady_clock::now();
  if (o.fork_sessions) {
    pid_t pid = fork();
    if (pid < 0) throw NetError(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {  // the child serves and exits: a crashing model takes only it down
      g_session_dir = dir;
      int rc = 0;
      try {
        ffi::Function::GetGlobal("rpc.ServerLoop").value()(static_cast<int64_t>(sock.fd()));
      } catch (const std::exception& e) {
        Log("session %d ended with an error: %s", session_no, e.what());
        rc = 1;
      }
      _exit(rc);
    }
    sock.Close();
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout)) {
        Log("session %d ran past its %d s limit: ending it", session_no, timeout);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL) {
      Log("session %d: the serving process died with signal %d", session_no, WTERMSIG(status));
    }
  } else {
    g_session_dir = dir;
    std::atomic<bool> done{false};
    int fd = sock.fd();
    std::thread watchdog([&] {
      while (!done && std::chrono::steady_clock::now() - start < std::chrono::seconds(timeout)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!done) {
        Log("session %d ran past its %d s limit: ending it", session_no, timeout);
        ::shutdown(fd, SHUT_RDWR);
      }
    });
    try {
      ffi::Function::GetGlobal("rpc.ServerLoop").value()(static_cast<int64_t>(fd));
    } catch (const std::exception& e) {
      Log("session %d ended with an error: %s", session_no, e.what());
    }
    done = true;
    watchdog.join();
  }
  // Remove the session's uploads.
  std::string cmd_dir = dir;
  if (auto* d = opendir(cmd_dir.c_str())) {
    while (auto* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") ::unlink((cmd_dir + "/" + n).c_str());
    }
    closedir(d);
  }
  ::rmdir(cmd_dir.c_str());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Log("session %d done after %.1f s", session_no, secs);
}

std::string RandomMatchKey(const std::string& key) {
  static std::mt19937_64 rng(std::random_device{}());
  return key + ":" + std::to_string(rng() % 100000000);
}

std::string TrackerRecv(Socket& t) { return t.RecvStr(1 << 20); }

void TrackerPut(Socket& t, const ServerOptions& o, int port, const std::string& matchkey) {
  std::string addr = o.custom_addr.empty() ? "null" : JsonString(o.custom_addr);
  t.SendStr("[" + std::to_string(kPut) + ", " + JsonString(o.key) + ", [" + std::to_string(port) + ", " +
            JsonString(matchkey) + "], " + addr + "]");
  if (TrackerRecv(t) != std::to_string(kSuccess)) throw NetError("the tracker refused the device's PUT");
}

// A client connecting to this device's own port (tracker or standalone mode): accept it, check
// the RPC magic and the key it asks for ("client:KEY ..."; an empty key too when allow_empty),
// answer, and serve its session. False when no session was served.
bool ServeClient(Socket& listener, const ServerOptions& o, const std::string& key, bool allow_empty,
                 int* sessions) {
  Socket conn(::accept(listener.fd(), nullptr, nullptr));
  if (!conn.valid()) return false;
  NoSigPipe(conn.fd());
  try {
    if (conn.RecvInt() != kRpcMagic) return false;
    std::string client_key = conn.RecvStr(4096);
    std::string head = client_key.substr(0, client_key.find(' '));
    if (head != "client:" + key && !(allow_empty && head == "client:")) {
      conn.SendInt(kCodeMismatch);
      Log("refused a client asking for key \"%s\" (this device is \"%s\")", head.c_str() + 7, o.key.c_str());
      return false;
    }
    conn.SendInt(kCodeSuccess);
    conn.SendStr("server:" + o.key);
    ServeSession(std::move(conn), o, client_key, ++*sessions);
    return true;
  } catch (const NetError& e) {
    Log("client handshake failed: %s", e.what());
    return false;
  }
}

// One connected tracker: register, then accept sessions until a network error.
void TrackerLoop(const ServerOptions& o, Socket& listener, int port, int* sessions) {
  Socket t = Connect(o.tracker_host, o.tracker_port);
  t.SendInt(kTrackerMagic);
  if (t.RecvInt() != kTrackerMagic) {
    throw FatalError(o.tracker_host + ":" + std::to_string(o.tracker_port) + " is not a TVM RPC tracker");
  }
  std::string addr = o.custom_addr.empty() ? "null" : JsonString(o.custom_addr);
  t.SendStr("[" + std::to_string(kUpdateInfo) + ", {\"key\": " + JsonString("server:" + o.key) + ", \"addr\": [" + addr +
            ", " + std::to_string(port) + "]}]");
  if (TrackerRecv(t) != std::to_string(kSuccess)) throw NetError("the tracker refused the device's info");
  Log("registered with tracker %s:%d as \"%s\", listening on %s:%d", o.tracker_host.c_str(), o.tracker_port,
      o.key.c_str(), o.listen_host.c_str(), port);
  while ((o.max_sessions == 0 || *sessions < o.max_sessions) && !StopRequested(o)) {
    std::string matchkey = RandomMatchKey(o.key);
    TrackerPut(t, o, port, matchkey);
    int unmatched_polls = 0;
    while (true) {
      fd_set fds;
      FD_ZERO(&fds);
      FD_SET(listener.fd(), &fds);
      timeval tv{2, 0};
      int r = select(listener.fd() + 1, &fds, nullptr, nullptr, &tv);
      if (r < 0 && errno == EINTR) continue;
      if (StopRequested(o)) return;
      if (r == 0) {  // idle: is our key still pending, or was it handed to a client that never came?
        t.SendStr("[" + std::to_string(kGetPendingMatchKeys) + "]");
        std::string pending = TrackerRecv(t);
        unmatched_polls = pending.find(JsonString(matchkey)) == std::string::npos ? unmatched_polls + 1 : 0;
        if (unmatched_polls * 2 > 6) {
          matchkey = RandomMatchKey(o.key);
          TrackerPut(t, o, port, matchkey);
          unmatched_polls = 0;
        }
        continue;
      }
      if (!ServeClient(listener, o, matchkey, false, sessions)) continue;
      break;  // re-register with a fresh match key
    }
  }
}

// One proxy connection: wait for a client, serve it.
void ProxyOnce(const ServerOptions& o, int* sessions) {
  Socket s = Connect(o.proxy_host, o.proxy_port);
  s.SendInt(kRpcMagic);
  s.SendStr("server:" + o.key);
  Log("waiting for a client on proxy %s:%d as \"%s\"", o.proxy_host.c_str(), o.proxy_port, o.key.c_str());
  if (!WaitReadable(s.fd(), o)) return;
  int32_t code = s.RecvInt();
  if (code == kCodeDuplicate) {
    throw FatalError("the key \"" + o.key + "\" is already in use on the proxy " + o.proxy_host + ":" +
                     std::to_string(o.proxy_port) + ": give this device another --key");
  }
  if (code == kCodeMismatch) return;  // no client came in time: reconnect
  if (code != kCodeSuccess) throw FatalError(o.proxy_host + ":" + std::to_string(o.proxy_port) + " is not a TVM RPC proxy");
  std::string remote_key = s.RecvStr(4096);
  ServeSession(std::move(s), o, remote_key, ++*sessions);
}

// Standalone: clients connect straight to this device (rpc.connect(host, port, key)).
void StandaloneLoop(const ServerOptions& o, Socket& listener, int* sessions) {
  while ((o.max_sessions == 0 || *sessions < o.max_sessions) && WaitReadable(listener.fd(), o)) {
    ServeClient(listener, o, o.key, true, sessions);  // rpc.connect's key may be left empty
  }
}

}  // namespace

int Serve(const ServerOptions& o) {
  signal(SIGPIPE, SIG_IGN);
  for (char c : o.key) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      Log("error: the key \"%s\" may hold only letters, digits, '-', '_' and '.'", o.key.c_str());
      return 2;
    }
  }
  if (!o.proxy_host.empty() + !o.tracker_host.empty() + o.standalone != 1) {
    Log("error: give exactly one of a proxy address, a tracker address or standalone mode");
    return 2;
  }
  ::mkdir(o.work_dir.c_str(), 0700);
  struct stat st{};
  if (stat(o.work_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    Log("error: cannot use the work directory %s", o.work_dir.c_str());
    return 2;
  }
  RegisterServerFunctions(o);
  Log("device: %s", DeviceInfoJson().c_str());
  Socket listener;
  int port = 0;
  if (!o.tracker_host.empty() || o.standalone) {
    try {
      listener = o.listen_port ? Listen(o.listen_host, o.listen_port, o.listen_port, &port)
                               : Listen(o.listen_host, o.listen_port_start, o.listen_port_end, &port);
    } catch (const FatalError& e) {
      Log("error: %s", e.what());
      return 2;
    }
    if (o.standalone) Log("listening on %s:%d for clients (standalone)", o.listen_host.c_str(), port);
  }
  int sessions = 0, failures = 0;
  while ((o.max_sessions == 0 || sessions < o.max_sessions) && !StopRequested(o)) {
    try {
      int before = sessions;
      if (!o.proxy_host.empty()) {
        ProxyOnce(o, &sessions);
      } else if (o.standalone) {
        StandaloneLoop(o, listener, &sessions);
      } else {
        TrackerLoop(o, listener, port, &sessions);
      }
      if (sessions > before) failures = 0;
    } catch (const FatalError& e) {
      Log("error: %s", e.what());
      return 3;
    } catch (const std::exception& e) {  // network loss: back off, then reconnect
      ++failures;
      if (o.max_retries > 0 && failures > o.max_retries) {
        Log("error: giving up after %d failed attempts: %s", failures, e.what());
        return 4;
      }
      double wait = std::min(o.backoff_max_s, 0.25 * (1 << std::min(failures, 8)));
      Log("%s; retrying in %.1f s (attempt %d)", e.what(), wait, failures);
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
      while (std::chrono::steady_clock::now() < until && !StopRequested(o)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  if (StopRequested(o)) {
    Log("stopped after %d sessions", sessions);
    return 0;
  }
  Log("served %d sessions: stopping", sessions);
  return 0;
}

}  // namespace rpc
}  // namespace tvmgen
