// Per-kernel profile and resident memory, on the device (Model::Profile, ReadResidentMemory in
// include/tvmgen/runtime.h). The profile is the Relax VM's instrument hook timing every call the VM
// makes with the device's steady clock; it is registered as the global tvmgen.profile_vm, which
// Model::Profile and RPC clients (`tvmgen bench --profile`) call, so runtime.cc does not link to it.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace ffi = tvm::ffi;

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

bool IsBuiltin(const std::string& name) {
  return name.rfind("vm.", 0) == 0 || name.rfind("runtime.", 0) == 0;
}

}  // namespace

ResidentMemory ReadResidentMemory() {
  ResidentMemory m;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %lld", &kb) == 1) m.rss_bytes = kb * 1024;
    if (std::sscanf(line.c_str(), "VmHWM: %lld", &kb) == 1) m.peak_bytes = kb * 1024;
  }
  return m;
}

namespace {

std::string ProfileVm(ffi::Module vm, const ffi::Function& entry, const std::vector<ffi::AnyView>& args, int runs,
                      DLDevice dev) {
  struct Count {
    int64_t calls = 0;
    int64_t ns = 0;
  };
  std::map<std::string, Count> counts;
  std::vector<Clock::time_point> started;
  int64_t kernel_ns = 0;
  // The VM calls this before and after each call instruction: (func, symbol, before, ret, args...).
  ffi::Function instrument = ffi::Function::FromPacked([&](ffi::PackedArgs a, ffi::Any* rv) {
    bool before = a[2].cast<bool>();
    if (before) {
      started.push_back(Clock::now());
    } else {
      auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started.back()).count();
      started.pop_back();
      std::string name(a[1].cast<ffi::String>());
      Count& c = counts[name];
      c.calls += 1;
      c.ns += elapsed;
      if (!IsBuiltin(name)) kernel_ns += elapsed;
    }
    *rv = static_cast<int64_t>(0);
  });
  auto set_instrument = vm->GetFunction("set_instrument");
  if (!set_instrument.has_value()) throw Error("this TVM runtime's VM has no set_instrument: cannot profile");
  auto sync = ffi::Function::GetGlobal("runtime.Device_StreamSync");
  auto wait = [&]() {
    if (dev.device_type != kDLCPU && sync.has_value()) (*sync)(dev, static_cast<int64_t>(0));
  };
  std::vector<double> plain_ms, kernel_ms;
  ffi::Any ret;
  entry.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);  // warm-up
  wait();
  for (int r = 0; r < runs; ++r) {  // interleaved: a busy device slows plain and profiled runs alike
    auto t0 = Clock::now();
    entry.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);
    wait();
    plain_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    (*set_instrument)(instrument);
    kernel_ns = 0;
    try {
      entry.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);
      wait();
    } catch (...) {
      (*set_instrument)(ffi::Function(nullptr));
      throw;
    }
    (*set_instrument)(ffi::Function(nullptr));
    kernel_ms.push_back(kernel_ns / 1e6);
  }
  std::ostringstream js;
  js.precision(10);
  js << "{\"runs\": " << runs << ", \"clock\": \"" << (dev.device_type == kDLCPU ? "device" : "device host")
     << "\", \"whole_run_ms\": " << Median(plain_ms) << ", \"kernels_median_ms\": " << Median(kernel_ms)
     << ", \"counts\": {";
  bool first = true;
  for (const auto& [name, c] : counts) {
    js << (first ? "" : ", ") << JsonString(name) << ": [" << c.calls << ", " << c.ns << "]";
    first = false;
  }
  js << "}}";
  return js.str();
}

// tvmgen.profile_vm(vm_module, entry, runs, device_type, device_id, args...) -> JSON: what RPC clients
// call (`tvmgen bench --profile`), so the clock that times each kernel is the device's.
// tvmgen.resident_memory() -> JSON {rss_bytes, peak_bytes}: the device process's /proc/self/status.
struct Register {
  Register() {
    ffi::Function::SetGlobal("tvmgen.profile_vm", ffi::Function::FromPacked([](ffi::PackedArgs a, ffi::Any* rv) {
      if (a.size() < 5) throw Error("tvmgen.profile_vm(vm, entry, runs, device_type, device_id, args...)");
      ffi::Module vm = a[0].cast<ffi::Module>();
      std::string entry_name(a[1].cast<ffi::String>());
      auto entry = vm->GetFunction(entry_name);
      if (!entry.has_value()) throw Error("the model has no function " + entry_name);
      DLDevice dev{static_cast<DLDeviceType>(a[3].cast<int64_t>()), static_cast<int>(a[4].cast<int64_t>())};
      std::vector<ffi::AnyView> args;
      for (int i = 5; i < a.size(); ++i) args.push_back(a[i]);
      *rv = ffi::String(ProfileVm(vm, *entry, args, static_cast<int>(a[2].cast<int64_t>()), dev));
    }), true);
    ffi::Function::SetGlobal("tvmgen.resident_memory", ffi::Function::FromTyped([]() {
      ResidentMemory m = ReadResidentMemory();
      return ffi::String("{\"rss_bytes\": " + std::to_string(m.rss_bytes) + ", \"peak_bytes\": " +
                         std::to_string(m.peak_bytes) + "}");
    }), true);
  }
};
Register register_globals;

}  // namespace
}  // namespace tvmgen
