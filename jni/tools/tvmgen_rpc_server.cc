// tvmgen-rpc-server: the native RPC device server as a command (what `tvmgen rpc device` runs).
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "tvmgen/rpc_server.h"

namespace {

const char* kUsage =
    "usage: tvmgen-rpc-server (--proxy HOST:PORT | --tracker HOST:PORT | --listen) --key KEY [options]\n"
    "  --key KEY              the key clients ask for (letters, digits, - _ .)\n"
    "  --proxy HOST:PORT      connect to a TVM RPC proxy and wait for clients there\n"
    "  --tracker HOST:PORT    register with a TVM RPC tracker and listen for its clients\n"
    "  --listen               standalone: clients connect straight to this server (rpc.connect)\n"
    "  --host ADDR            tracker/standalone: address to listen on (default 127.0.0.1)\n"
    "  --port N               tracker/standalone: port to listen on (default: first free in 9090-9199)\n"
    "  --custom-addr ADDR     tracker mode: address the tracker gives clients\n"
    "  --work-dir DIR         uploads land here (default ./tvmgen-rpc-work)\n"
    "  --max-upload-mb N      largest upload accepted (default 512)\n"
    "  --session-timeout S    end sessions longer than S seconds (default 600)\n"
    "  --max-retries N        give up after N failed connections in a row (default 0: never)\n"
    "  --max-sessions N       exit after N sessions (default 0: serve forever)\n"
    "  --no-fork              serve sessions in this process (default: a child process each)\n"
    "  --system-lib-only      serve only the models linked into this program (remote.system_lib());\n"
    "                         refuse uploads (what the iOS app does: iOS cannot load uploaded code)\n"
    "  --emulator NAME        this program runs under that emulator (e.g. qemu-aarch64): the device\n"
    "                         info says so, and clients that time kernels warn that the times are its\n"
    "  --info                 print what this device is (JSON) and exit\n";

bool HostPort(const std::string& v, std::string* host, int* port) {
  size_t c = v.rfind(':');
  if (c == std::string::npos || c == 0) return false;
  *host = v.substr(0, c);
  *port = std::atoi(v.c_str() + c + 1);
  return *port > 0 && *port < 65536;
}

int Usage(const std::string& msg) {
  std::fprintf(stderr, "tvmgen-rpc-server: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  tvmgen::rpc::ServerOptions o;
  o.work_dir = "tvmgen-rpc-work";
  bool key_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
      } else if (a == "--emulator") {
        o.emulator = value();
      } else if (a == "--info") {
        tvmgen::rpc::RegisterServerFunctions(o);
        std::printf("%s\n", tvmgen::rpc::DeviceInfoJson().c_str());
        return 0;
      } else if (a == "--key") {
        o.key = value();
        key_given = true;
      } else if (a == "--proxy") {
        if (!HostPort(value(), &o.proxy_host, &o.proxy_port)) return Usage("--proxy takes HOST:PORT");
      } else if (a == "--tracker") {
        if (!HostPort(value(), &o.tracker_host, &o.tracker_port)) return Usage("--tracker takes HOST:PORT");
      } else if (a == "--listen") {
        o.standalone = true;
      } else if (a == "--system-lib-only") {
        o.system_lib_only = true;
      } else if (a == "--host") {
        o.listen_host = value();
      } else if (a == "--port") {
        o.listen_port = std::stoi(value());
      } else if (a == "--custom-addr") {
        o.custom_addr = value();
      } else if (a == "--work-dir") {
        o.work_dir = value();
      } else if (a == "--max-upload-mb") {
        o.max_upload_bytes = std::stoll(value()) << 20;
      } else if (a == "--session-timeout") {
        o.session_timeout_s = std::stoi(value());
      } else if (a == "--max-retries") {
        o.max_retries = std::stoi(value());
      } else if (a == "--max-sessions") {
        o.max_sessions = std::stoi(value());
      } else if (a == "--no-fork") {
        o.fork_sessions = false;
      } else {
        return Usage("unknown option " + a);
      }
    } catch (const std::invalid_argument& e) {
      return Usage(std::string(e.what()).find("sto") == 0 ? a + " takes a number" : e.what());
    } catch (const std::out_of_range&) {
      return Usage(a + ": number out of range");
    }
  }
  if (!key_given) return Usage("--key is required");
  if (!o.proxy_host.empty() + !o.tracker_host.empty() + o.standalone != 1) {
    return Usage("give exactly one of --proxy, --tracker or --listen");
  }
  if (o.session_timeout_s <= 0 || o.max_upload_bytes <= 0) return Usage("limits must be positive");
  return tvmgen::rpc::Serve(o);
}
