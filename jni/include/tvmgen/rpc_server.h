/*!
 * tvmgen native RPC device server: what the RPC apps run, and `tvmgen rpc device`.
 *
 * Connects to a TVM RPC proxy, or registers with a tracker and listens, or listens for clients
 * directly (standalone), under a key; serves each session with the TVM runtime's own server loop
 * (rpc.ServerLoop); reconnects after each session and after network loss with bounded backoff.
 * Uploads are confined to the work directory (plain file names only) and bounded in size;
 * sessions are bounded in length. In system-lib mode (iOS) it serves only the models linked
 * into the program and refuses uploads.
 */
#ifndef TVMGEN_RPC_SERVER_H_
#define TVMGEN_RPC_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tvmgen {
namespace rpc {

struct ServerOptions {
  std::string key = "tvmgen";
  std::string proxy_host;  // proxy mode when set
  int proxy_port = 0;
  std::string tracker_host;  // tracker mode when set
  int tracker_port = 0;
  // Tracker mode: where clients connect. Loopback unless an explicit address is given.
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;        // 0: any free port from listen_port_start
  int listen_port_start = 9090;
  int listen_port_end = 9199;
  std::string custom_addr;    // address the tracker hands to clients (default: as the tracker sees us)
  std::string work_dir;       // uploads land here; created if missing
  int64_t max_upload_bytes = 512ll << 20;
  int session_timeout_s = 600;  // a session running longer is ended
  int max_retries = 0;          // connection failures in a row before giving up; 0 = never give up
  double backoff_max_s = 10.0;
  int max_sessions = 0;         // stop after this many sessions; 0 = serve forever
  bool fork_sessions = true;    // serve each session in a child process (a crashing model kills only it)
  // Standalone mode: listen on listen_host:listen_port (or the first free port from listen_port_start)
  // and serve clients that connect directly (rpc.connect(host, port, key)), with no proxy or tracker.
  bool standalone = false;
  // Serve only the models linked into this program (TVM system-lib mode): an iOS app cannot load
  // code it receives, so uploads and load_module are refused with a message naming
  // remote.system_lib(), and the device info says so.
  bool system_lib_only = false;
  std::vector<std::string> linked_models;  // names reported by tvmgen.device_info (system-lib mode)
  // The emulator this program runs under (e.g. qemu-aarch64), as its launcher knows it: reported by
  // tvmgen.device_info, so a client timing kernels here knows the times are the emulator's, not a CPU's.
  std::string emulator;
  // When set, Serve returns within about a second after it becomes true (an app's Stop button).
  const std::atomic<bool>* stop = nullptr;
};

/*! \brief Where the server's log lines go (default: stderr). An app shows them on screen. */
void SetLogSink(std::function<void(const std::string&)> sink);

/*! \brief The device as this server reports it (JSON): platform, arch, ABI, devices, versions. */
std::string DeviceInfoJson();

/*! \brief Register the server-side globals (work path, upload, load_module, tvmgen.device_info). */
void RegisterServerFunctions(const ServerOptions& options);

/*! \brief Serve until max_sessions is reached or retries are exhausted; returns an exit code. */
int Serve(const ServerOptions& options);

}  // namespace rpc
}  // namespace tvmgen

#endif  // TVMGEN_RPC_SERVER_H_
