// The iOS app's logic in plain C++ (no Objective-C): the RPC server's settings and lifetime, and
// runs of the model linked into the app. TvmgenBridge.mm wraps it for the UI; the tests build it
// on Linux against the same jni/ sources, so this code is exercised without a Mac.
#ifndef TVMGEN_APP_CORE_H_
#define TVMGEN_APP_CORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tvmgen_app {

/*! \brief What the settings screen holds. */
struct ServerSettings {
  std::string mode = "standalone";  // standalone | proxy | tracker
  // standalone: the address to listen on; proxy / tracker: the proxy's or tracker's address
  std::string address = "0.0.0.0";
  int port = 9090;
  std::string key = "iphone";
  std::string work_dir;  // a writable directory (the app's caches directory)
};

/*! \brief "" when the settings can start a server, else what is wrong, in words for the screen. */
std::string CheckSettings(const ServerSettings& settings);

/*!
 * \brief The RPC device server on a background thread, serving the models linked into the app
 * (system-lib mode: uploads are refused; clients call remote.system_lib()).
 */
class Server {
 public:
  using LogFn = std::function<void(const std::string&)>;
  explicit Server(LogFn log);
  ~Server();  // stops the server
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /*! \brief Start serving; false with *error set when the settings are wrong or it already runs. */
  bool Start(const ServerSettings& settings, const std::vector<std::string>& linked_models, std::string* error);
  /*! \brief Ask the server to stop and wait for it (about a second at most between sessions). */
  void Stop();
  bool running() const { return running_.load(); }

 private:
  LogFn log_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
};

/*!
 * \brief Load the model linked into the app (its manifest in `model_dir`), run it `warmup` +
 * `iterations` times on seeded inputs, and return the result as JSON: device, timings (load,
 * init, first run, median copy-in / run / copy-out), and per output its shape, min, max, mean
 * and top-5 for a 1xN output. Throws tvmgen::Error with the reason on failure.
 */
std::string RunLinkedModel(const std::string& model_dir, int warmup, int iterations);

}  // namespace tvmgen_app

#endif  // TVMGEN_APP_CORE_H_
