// Per-kernel profile and resident memory, on the device (Model::Profile, ReadResidentMemory in
// include/tvmgen/runtime.h). The profile is the Relax VM's instrument hook timing every call the VM
// makes with the device's steady clock; it is registered as the global tvmgen.profile_vm, which
// Model::Profile and RPC clients (`tvmgen bench --profile`) call, so runtime.cc does not link to it.
// On OpenCL (libtvmgen_opencl loaded) the kernels' times are the device's own event timestamps
// instead (tvmgen.opencl.profiling / kernel_times), and on Vulkan (libtvmgen_vulkan) the timestamp
// queries around each dispatch (tvmgen.vulkan.profiling / kernel_times): launches are asynchronous, so
// the host's clock around a call would only time the launch.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
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

#include "common/json.h"
#include "tvmgen/runtime.h"

namespace tvmgen {
namespace ffi = tvm::ffi;

namespace {

using Clock = std::chrono::steady_clock;

bool IsBuiltin(const std::string& name) {
  return name.rfind("vm.", 0) == 0 || name.rfind("runtime.", 0) == 0;
}

constexpr const char* kOpenCLEventsClock = "device (OpenCL events)";
constexpr const char* kVulkanTimestampsClock = "device (Vulkan timestamps)";

// The VM function that launched an OpenCL kernel. TVM's codegen names a PrimFunc's kernels after it:
// "<func>_kernel", further ones "<func>_kernel_1" / "<func>_kernel1". The longest VM function the
// hook saw that fits wins; otherwise the suffix is stripped.
std::string LaunchingFunction(const std::string& kernel, const std::map<std::string, std::pair<int64_t, int64_t>>& seen) {
  auto suffix_ok = [](const std::string& rest) {  // "_kernel", "_kernel1", "_kernel_1"
    static const std::string k = "_kernel";
    if (rest.compare(0, k.size(), k) != 0) return false;
    size_t i = k.size();
    if (i < rest.size() && rest[i] == '_') ++i;
    if (i == rest.size()) return i == k.size();  // "_kernel_" alone is no suffix
    for (; i < rest.size(); ++i) {
      if (rest[i] < '0' || rest[i] > '9') return false;
    }
    return true;
  };
  std::string best;
  for (const auto& [name, c] : seen) {
    if (IsBuiltin(name) || name.size() <= best.size() || kernel.compare(0, name.size(), name) != 0) continue;
    if (suffix_ok(kernel.substr(name.size()))) best = name;
  }
  if (!best.empty()) return best;
  size_t at = kernel.rfind("_kernel");
  if (at != std::string::npos && at > 0 && suffix_ok(kernel.substr(at))) return kernel.substr(0, at);
  return kernel;
}

// libtvmgen_opencl's (or libtvmgen_vulkan's) profiling globals, when that library is loaded.
struct OpenCLEvents {
  ffi::Function profiling, kernel_times;
  static bool Find(DLDevice dev, OpenCLEvents* out) {
    if (dev.device_type != kDLOpenCL && dev.device_type != kDLVulkan) return false;
    std::string api = dev.device_type == kDLOpenCL ? "opencl" : "vulkan";
    auto p = ffi::Function::GetGlobal("tvmgen." + api + ".profiling");
    auto t = ffi::Function::GetGlobal("tvmgen." + api + ".kernel_times");
    if (!p.has_value() || !t.has_value()) return false;
    out->profiling = *p;
    out->kernel_times = *t;
    return true;
  }
  // {kernel: (launches, ns)} since the last call.
  std::map<std::string, std::pair<int64_t, int64_t>> Take() const {
    std::map<std::string, std::pair<int64_t, int64_t>> out;
    auto m = kernel_times().cast<ffi::Map<ffi::String, ffi::Array<int64_t>>>();
    for (const auto& kv : m) out[std::string(kv.first)] = {kv.second[0], kv.second[1]};
    return out;
  }
};

void CountsJson(std::ostringstream& js, const std::map<std::string, std::pair<int64_t, int64_t>>& counts) {
  js << "{";
  bool first = true;
  for (const auto& [name, c] : counts) {
    js << (first ? "" : ", ") << JsonString(name) << ": [" << c.first << ", " << c.second << "]";
    first = false;
  }
  js << "}";
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
  using Counts = std::map<std::string, std::pair<int64_t, int64_t>>;  // name -> (calls, total ns)
  Counts counts;  // every call the VM made, timed by this process's clock
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
      auto& c = counts[name];
      c.first += 1;
      c.second += elapsed;
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
  // OpenCL: the profiled runs go to a profiling queue and each kernel's time is its event's
  // END - START; the plain runs stay on the ordinary queue.
  OpenCLEvents events;
  bool use_events = OpenCLEvents::Find(dev, &events);
  Counts launches;  // OpenCL kernel -> (launches, event ns)
  std::vector<double> plain_ms, kernel_ms;
  ffi::Any ret;
  entry.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);  // warm-up
  wait();
  for (int r = 0; r < runs; ++r) {  // interleaved: a busy device slows plain and profiled runs alike
    auto t0 = Clock::now();
    entry.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);
    wait();
    plain_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (use_events) {
      events.profiling(true);  // throws, naming the device, where the driver refuses profiling
      events.Take();           // nothing from before this run
    }
    (*set_instrument)(instrument);
    kernel_ns = 0;
    try {
      entry.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);
      wait();
    } catch (...) {
      (*set_instrument)(ffi::Function(nullptr));
      if (use_events) {
        try {
          events.Take();
          events.profiling(false);
        } catch (...) {
        }
      }
      throw;
    }
    (*set_instrument)(ffi::Function(nullptr));
    if (use_events) {
      Counts run;
      try {
        run = events.Take();
      } catch (...) {
        try {
          events.profiling(false);
        } catch (...) {
        }
        throw;
      }
      events.profiling(false);
      int64_t ns = 0;
      for (const auto& [k, c] : run) {
        launches[k].first += c.first;
        launches[k].second += c.second;
        ns += c.second;
      }
      kernel_ms.push_back(ns / 1e6);
    } else {
      kernel_ms.push_back(kernel_ns / 1e6);
    }
  }
  std::ostringstream js;
  js.precision(10);
  const char* clock = use_events ? (dev.device_type == kDLVulkan ? kVulkanTimestampsClock : kOpenCLEventsClock)
                     : dev.device_type == kDLCPU ? "device"
                                                 : "device host";
  js << "{\"runs\": " << runs << ", \"clock\": \"" << clock << "\", \"whole_run_ms\": " << Median(plain_ms)
     << ", \"kernels_median_ms\": " << Median(kernel_ms)
     // the fastest of each: a shared machine's noise only adds time, so these compare best
     << ", \"whole_run_min_ms\": " << *std::min_element(plain_ms.begin(), plain_ms.end())
     << ", \"kernels_min_ms\": " << *std::min_element(kernel_ms.begin(), kernel_ms.end()) << ", \"counts\": ";
  if (use_events) {
    // One row per VM function (as on the CPU): the calls the VM made to it, its kernels' event time.
    Counts rows;
    for (const auto& [kernel, c] : launches) {
      std::string fn = LaunchingFunction(kernel, counts);
      auto it = counts.find(fn);
      auto& row = rows[fn];
      row.first = it != counts.end() ? it->second.first : std::max(row.first, c.first);
      row.second += c.second;
    }
    CountsJson(js, rows);
    // each OpenCL kernel: (launches, event ns); each Vulkan one: (dispatches, timestamp ns)
    js << (dev.device_type == kDLVulkan ? ", \"vulkan_kernels\": " : ", \"opencl_kernels\": ");
    CountsJson(js, launches);
    js << ", \"host_counts\": ";  // every VM call timed by the host's clock (launch costs, builtins)
    CountsJson(js, counts);
  } else {
    CountsJson(js, counts);
  }
  js << "}";
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
