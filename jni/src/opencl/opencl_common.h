// Shared by the parts of libtvmgen_opencl (device API, kernel module, kernel cache): the OpenCL
// workspace (platform, devices, context, queues), error checking and small helpers.
#ifndef TVMGEN_OPENCL_COMMON_H_
#define TVMGEN_OPENCL_COMMON_H_

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>
#include "device_api.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cl_api.h"
#include "sha256.h"

namespace tvmgen {
namespace opencl {

namespace ffi = tvm::ffi;
using namespace tvmgen::cl;  // NOLINT
using tvm::runtime::DeviceAPI;
using tvm::runtime::DeviceAttrKind;

constexpr const char* kVersion = "tvmgen-opencl 1";

#define TVMGEN_CL_CHECK(call, what)                                                           \
  do {                                                                                        \
    cl_int e_ = (call);                                                                       \
    if (e_ != CL_SUCCESS) {                                                                   \
      TVM_FFI_THROW(RuntimeError) << "OpenCL: " << (what) << " failed: " << ErrorName(e_) << " (" \
                                  << e_ << ")";                                               \
    }                                                                                         \
  } while (0)

inline bool LogOn() {
  static bool on = [] {
    const char* v = std::getenv("TVMGEN_OPENCL_LOG");
    return v != nullptr && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

inline double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

inline std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

// ------------------------------------------------------------------ devices, context, queues
struct DeviceInfo {
  cl_device_id id;
  std::string name, vendor, driver, version, platform_version;
  size_t max_work_group = 0;
  std::vector<size_t> max_work_items;
  cl_ulong local_mem = 0, global_mem = 0;
  cl_uint compute_units = 0, clock_mhz = 0;
  cl_command_queue queue = nullptr;
};

inline std::string DeviceString(const Api& api, cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (api.GetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  api.GetDeviceInfo(d, what, n, &s[0], nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

inline std::string PlatformString(const Api& api, cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (api.GetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  api.GetPlatformInfo(p, what, n, &s[0], nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// The OpenCL platform in use: GPUs when any platform has one, otherwise the first platform's
// devices of any type (PoCL on a Linux host is a CPU device).
class Workspace {
 public:
  static Workspace& Global() {
    static Workspace* w = new Workspace();  // leaked: outlives every module and tensor
    return *w;
  }

  // Initialise on first use; throws the loader's or the driver's error.
  void Init() {
    std::lock_guard<std::mutex> lock(mu_);
    if (initialized_) {
      if (!init_error_.empty()) TVM_FFI_THROW(RuntimeError) << init_error_;
      return;
    }
    initialized_ = true;
    try {
      DoInit();
    } catch (const ffi::Error& e) {
      init_error_ = e.message();
      throw;
    }
  }

  bool TryInit() {
    try {
      Init();
      return true;
    } catch (const ffi::Error&) {
      return false;
    }
  }

  size_t num_devices() const { return devices_.size(); }
  cl_context context() const { return context_; }
  const std::string& platform_name() const { return platform_name_; }

  DeviceInfo& device(int id) {
    Init();
    if (id < 0 || id >= static_cast<int>(devices_.size())) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL device " << id << " does not exist (" << devices_.size()
                                  << " device(s) on platform " << platform_name_ << ")";
    }
    return devices_[id];
  }

  cl_command_queue Queue(int id, void* stream) {
    if (stream != nullptr) return static_cast<cl_command_queue>(stream);
    return device(id).queue;
  }

  // Sizes of live buffers (for workspace reuse).
  std::mutex mem_mu;
  std::unordered_map<void*, size_t> sizes;
  // Buffers allocated with the memory scope "global.host" (CL_MEM_ALLOC_HOST_PTR): host copies
  // to and from them map the buffer (clEnqueueMapBuffer + memcpy) instead of Read/WriteBuffer.
  std::unordered_set<void*> host_visible;
  std::multimap<size_t, void*> free_workspace;  // per process; one device in practice

 private:
  void DoInit() {
    const Api& api = cl::Get();
    cl_uint np = 0;
    cl_int err = api.GetPlatformIDs(0, nullptr, &np);
    if (err != CL_SUCCESS || np == 0) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL (" << LoadedPath() << "): no OpenCL platform found ("
                                  << ErrorName(err) << "); is an ICD installed (/etc/OpenCL/vendors)?";
    }
    std::vector<cl_platform_id> platforms(np);
    api.GetPlatformIDs(np, platforms.data(), nullptr);
    cl_platform_id chosen = nullptr;
    std::vector<cl_device_id> ids;
    for (cl_device_type type : {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL}) {
      for (cl_platform_id p : platforms) {
        cl_uint nd = 0;
        if (api.GetDeviceIDs(p, type, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
        ids.resize(nd);
        api.GetDeviceIDs(p, type, nd, ids.data(), nullptr);
        chosen = p;
        break;
      }
      if (chosen) break;
    }
    if (chosen == nullptr) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL (" << LoadedPath() << "): " << np
                                  << " platform(s) but no device";
    }
    platform_name_ = PlatformString(api, chosen, CL_PLATFORM_NAME);
    std::string platform_version = PlatformString(api, chosen, CL_PLATFORM_VERSION);
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(chosen), 0};
    context_ = api.CreateContext(props, static_cast<cl_uint>(ids.size()), ids.data(), nullptr, nullptr, &err);
    TVMGEN_CL_CHECK(err, "clCreateContext");
    for (cl_device_id d : ids) {
      DeviceInfo info;
      info.id = d;
      info.name = DeviceString(api, d, CL_DEVICE_NAME);
      info.vendor = DeviceString(api, d, CL_DEVICE_VENDOR);
      info.driver = DeviceString(api, d, CL_DRIVER_VERSION);
      info.version = DeviceString(api, d, CL_DEVICE_VERSION);
      info.platform_version = platform_version;
      api.GetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(size_t), &info.max_work_group, nullptr);
      cl_uint dims = 0;
      api.GetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, sizeof(dims), &dims, nullptr);
      info.max_work_items.resize(dims);
      if (dims) api.GetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, dims * sizeof(size_t), info.max_work_items.data(), nullptr);
      api.GetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(cl_ulong), &info.local_mem, nullptr);
      api.GetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(cl_ulong), &info.global_mem, nullptr);
      api.GetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cl_uint), &info.compute_units, nullptr);
      api.GetDeviceInfo(d, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof(cl_uint), &info.clock_mhz, nullptr);
      info.queue = api.CreateCommandQueue(context_, d, 0, &err);
      TVMGEN_CL_CHECK(err, "clCreateCommandQueue");
      devices_.push_back(std::move(info));
    }
    if (LogOn()) {
      std::fprintf(stderr, "tvmgen-opencl: %s, platform %s, %zu device(s), device 0: %s (driver %s)\n",
                   LoadedPath().c_str(), platform_name_.c_str(), devices_.size(), devices_[0].name.c_str(),
                   devices_[0].driver.c_str());
    }
  }

  std::mutex mu_;
  bool initialized_ = false;
  std::string init_error_;
  cl_context context_ = nullptr;
  std::string platform_name_;
  std::vector<DeviceInfo> devices_;
};

// The kDLOpenCL DeviceAPI, one per process (opencl_device_api.cc).
DeviceAPI* GlobalDeviceAPI();

// The device this thread last selected with SetDevice: kernels launch on its queue.
extern thread_local int current_device;

}  // namespace opencl
}  // namespace tvmgen

#endif  // TVMGEN_OPENCL_COMMON_H_
