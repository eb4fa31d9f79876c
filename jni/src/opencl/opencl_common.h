// Shared by the parts of libtvmgen_opencl (device API, kernel module, kernel cache): the OpenCL
// workspace (platform, devices, context, queues), error checking and small helpers (JSON: ../common/json.h).
#ifndef TVMGEN_OPENCL_COMMON_H_
#define TVMGEN_OPENCL_COMMON_H_

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
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

#include "../common/json.h"
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

// ------------------------------------------------------------------ devices, context, queues
struct DeviceInfo {
  cl_device_id id;
  std::string name, vendor, driver, version, platform_version;
  size_t max_work_group = 0;
  std::vector<size_t> max_work_items;
  cl_ulong local_mem = 0, global_mem = 0;
  cl_uint compute_units = 0, clock_mhz = 0;
  std::string extensions;                       // CL_DEVICE_EXTENSIONS, space separated
  bool image_support = false;                   // CL_DEVICE_IMAGE_SUPPORT
  size_t image2d_max_width = 0, image2d_max_height = 0, image_max_array = 0;
  bool HasExtension(const std::string& ext) const {
    return (" " + extensions + " ").find(" " + ext + " ") != std::string::npos;
  }
  cl_command_queue queue = nullptr;             // the default queue: one of these two
  cl_command_queue plain_queue = nullptr;       // created with the workspace
  cl_command_queue profiling_queue = nullptr;   // CL_QUEUE_PROFILING_ENABLE, created on first use
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

// ------------------------------------------------------------------ texture memory
// TVM's texture scopes keep an N-d tensor whose last axis has 4 elements (one RGBA pixel) in a 2-d
// image array. The axes before the last are split in three runs, in order: array layers (depth),
// rows (height) and columns (width); where the runs split depends on the scope:
//   global.texture         [..., H, W, 4]: the last axis before the pixel is the width, the one before the height
//   global.texture-nhwc    [N, C, H, W, 4]: N layers, C rows, H*W columns
//   global.texture-weight  [O, ...,  4]: one layer, O rows, the rest columns
// The element order is the tensor's row-major order, so host bytes copy to the image unchanged.
struct ImageInfo {
  size_t width = 1, height = 1, depth = 1;
  size_t pixel_bytes = 16;  // 4 channels
  size_t bytes() const { return width * height * depth * pixel_bytes; }
};

inline bool IsTextureScope(const std::string& scope) { return scope.rfind("global.texture", 0) == 0; }

// Throws for scopes other than global, global.host and the three texture scopes.
inline ImageInfo TextureShape(const std::string& scope, int ndim, const int64_t* shape, DLDataType dtype) {
  if (ndim < 2 || shape[ndim - 1] != 4) {
    std::ostringstream o;
    for (int i = 0; i < ndim; ++i) o << (i ? "x" : "") << shape[i];
    TVM_FFI_THROW(RuntimeError) << "OpenCL texture memory (" << scope << ") holds tensors whose last axis is 4 "
                                << "(one RGBA pixel); this one is " << o.str();
  }
  if (dtype.code != kDLFloat || (dtype.bits != 32 && dtype.bits != 16) || dtype.lanes != 1) {
    TVM_FFI_THROW(RuntimeError) << "OpenCL texture memory (" << scope << ") holds float32 or float16 tensors, not "
                                << "code " << int(dtype.code) << " bits " << int(dtype.bits) << " lanes " << dtype.lanes;
  }
  int split;  // axes [0, split-1) -> depth, [split-1, split) -> height, [split, ndim-1) -> width
  if (scope == "global.texture") {
    split = ndim - 2;
  } else if (scope == "global.texture-nhwc") {
    split = 2;
  } else if (scope == "global.texture-weight") {
    split = 1;
  } else {
    TVM_FFI_THROW(RuntimeError) << "unknown OpenCL texture memory scope \"" << scope << "\"";
  }
  ImageInfo info;
  for (int i = 0; i < ndim - 1; ++i) {
    size_t n = static_cast<size_t>(shape[i]);
    if (i < split - 1) info.depth *= n;
    else if (i < split) info.height *= n;
    else info.width *= n;
  }
  info.pixel_bytes = 4 * (dtype.bits / 8);
  return info;
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
      if (!probed_) DoProbe();
      probed_ = true;
      DoInit();
    } catch (const ffi::Error& e) {
      init_error_ = e.message();
      throw;
    }
  }

  // The platform and device `id` as the driver describes them, before the context exists (creating it takes
  // NVIDIA ~0.2 s): what a cache key needs. Throws as Init does.
  const DeviceInfo& Probe(int id) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!initialized_ && !probed_) {
        probed_ = true;
        try {
          DoProbe();
        } catch (const ffi::Error& e) {
          initialized_ = true;  // Init gives the same error
          init_error_ = e.message();
        }
      }
      if (!init_error_.empty()) TVM_FFI_THROW(RuntimeError) << init_error_;
      if (id >= 0 && id < static_cast<int>(devices_.size())) return devices_[id];
    }
    return device(id);  // its error
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

  // ---------------------------------------------------------------- profiling mode
  // Off by default. On: every device's queue (and each stream created while it is on) has
  // CL_QUEUE_PROFILING_ENABLE and each kernel launch records an event, read by TakeKernelTimes.
  // Switching finishes the current queues: call it between runs, not during one.
  bool profiling() const { return profiling_.load(std::memory_order_relaxed); }

  // The queue properties for new queues / streams.
  cl_command_queue_properties queue_properties() const { return profiling() ? CL_QUEUE_PROFILING_ENABLE : 0; }

  // Returns the previous setting. Throws, naming the device and driver, where profiling is refused.
  bool SetProfiling(bool on) {
    Init();
    std::lock_guard<std::mutex> lock(mu_);
    bool was = profiling();
    if (was == on) return was;
    const Api& api = cl::Get();
    if (on) {
      if (!api.GetEventProfilingInfo || !api.WaitForEvents || !api.ReleaseEvent) {
        TVM_FFI_THROW(RuntimeError) << "OpenCL profiling: " << LoadedPath() << " lacks "
                                    << (!api.GetEventProfilingInfo ? "clGetEventProfilingInfo"
                                        : !api.WaitForEvents        ? "clWaitForEvents"
                                                                    : "clReleaseEvent")
                                    << ": per-kernel device times cannot be read with this OpenCL library";
      }
      for (DeviceInfo& d : devices_) {
        cl_command_queue_properties supported = 0;
        cl_int e = api.GetDeviceInfo(d.id, CL_DEVICE_QUEUE_PROPERTIES, sizeof(supported), &supported, nullptr);
        if (e == CL_SUCCESS && !(supported & CL_QUEUE_PROFILING_ENABLE)) {
          TVM_FFI_THROW(RuntimeError) << "OpenCL device " << d.name << " (driver " << d.driver << ", platform "
                                      << platform_name_ << ") does not support profiling command queues "
                                      << "(CL_QUEUE_PROFILING_ENABLE): per-kernel device times are not available";
        }
      }
    }
    // Each device keeps its plain queue and, once profiling was first switched on, a profiling queue:
    // switching finishes the current one and makes the other the default (no queue is recreated).
    for (DeviceInfo& d : devices_) {
      if (on && d.profiling_queue == nullptr) {
        cl_int err = CL_SUCCESS;
        d.profiling_queue = api.CreateCommandQueue(context_, d.id, CL_QUEUE_PROFILING_ENABLE, &err);
        if (err != CL_SUCCESS) {
          d.profiling_queue = nullptr;
          TVM_FFI_THROW(RuntimeError) << "OpenCL device " << d.name << " (driver " << d.driver << ", platform "
                                      << platform_name_ << ") refused a command queue with "
                                      << "CL_QUEUE_PROFILING_ENABLE: clCreateCommandQueue failed: " << ErrorName(err)
                                      << " (" << err << ")";
        }
      }
    }
    for (DeviceInfo& d : devices_) {
      TVMGEN_CL_CHECK(api.Finish(d.queue), "clFinish (before switching profiling)");
      d.queue = on ? d.profiling_queue : d.plain_queue;
    }
    profiling_.store(on);
    return was;
  }

  // Streams (CreateStream) made while profiling was on: their launches record events too. A stream
  // made before has no CL_QUEUE_PROFILING_ENABLE and its launches are not timed.
  void NoteStream(void* stream, bool created) {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (created && profiling()) {
      profiling_streams_.insert(stream);
    } else if (!created) {
      profiling_streams_.erase(stream);
    }
  }

  // Whether a launch on this stream (nullptr: the device's queue) records an event now.
  bool Timed(void* stream) {
    if (!profiling()) return false;
    if (stream == nullptr) return true;
    std::lock_guard<std::mutex> lock(events_mu_);
    return profiling_streams_.count(stream) != 0;
  }

  // Called by a kernel launch in profiling mode: the launch's event, kept until TakeKernelTimes.
  void RecordEvent(const std::string& kernel, int device_id, cl_event event) {
    std::lock_guard<std::mutex> lock(events_mu_);
    events_.push_back({kernel, device_id, event});
  }

  struct KernelTime {
    int64_t launches = 0;
    int64_t ns = 0;  // sum of CL_PROFILING_COMMAND_END - CL_PROFILING_COMMAND_START
  };

  // Waits for every recorded launch, reads its device timestamps, releases the events and returns
  // the totals per kernel name. Throws (after releasing them all) when the driver gives no times.
  std::map<std::string, KernelTime> TakeKernelTimes() {
    std::vector<Event> events;
    {
      std::lock_guard<std::mutex> lock(events_mu_);
      events.swap(events_);
    }
    std::map<std::string, KernelTime> out;
    if (events.empty()) return out;
    const Api& api = cl::Get();
    std::string error;
    std::vector<cl_event> handles;
    for (const Event& e : events) handles.push_back(e.event);
    cl_int err = api.WaitForEvents(static_cast<cl_uint>(handles.size()), handles.data());
    if (err != CL_SUCCESS) error = std::string("clWaitForEvents failed: ") + ErrorName(err) + " (" + std::to_string(err) + ")";
    for (const Event& e : events) {
      if (error.empty()) {
        cl_ulong start = 0, end = 0;
        cl_int e1 = api.GetEventProfilingInfo(e.event, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr);
        cl_int e2 = api.GetEventProfilingInfo(e.event, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
        if (e1 != CL_SUCCESS || e2 != CL_SUCCESS) {
          cl_int bad = e1 != CL_SUCCESS ? e1 : e2;
          const DeviceInfo& d = devices_[e.device_id];
          error = "clGetEventProfilingInfo(" + std::string(e1 != CL_SUCCESS ? "CL_PROFILING_COMMAND_START"
                                                                             : "CL_PROFILING_COMMAND_END") +
                  ") for kernel " + e.kernel + " failed: " + ErrorName(bad) + " (" + std::to_string(bad) +
                  "): OpenCL device " + d.name + " (driver " + d.driver + ", platform " + platform_name_ +
                  ") gives no event timestamps";
        } else {
          KernelTime& k = out[e.kernel];
          k.launches += 1;
          k.ns += end >= start ? static_cast<int64_t>(end - start) : 0;
        }
      }
      api.ReleaseEvent(e.event);
    }
    if (!error.empty()) TVM_FFI_THROW(RuntimeError) << "OpenCL profiling: " << error;
    return out;
  }

  // Sizes of live buffers (for workspace reuse).
  std::mutex mem_mu;
  std::unordered_map<void*, size_t> sizes;
  // Buffers allocated with the memory scope "global.host" (CL_MEM_ALLOC_HOST_PTR): host copies
  // to and from them map the buffer (clEnqueueMapBuffer + memcpy) instead of Read/WriteBuffer.
  std::unordered_set<void*> host_visible;
  std::multimap<size_t, void*> free_workspace;  // per process; one device in practice
  // Images (texture memory scopes): DLTensor::data is the image's cl_mem, as for buffers.
  std::unordered_map<void*, ImageInfo> images;
  bool IsImage(const void* mem) {
    std::lock_guard<std::mutex> lock(mem_mu);
    return images.count(const_cast<void*>(mem)) != 0;
  }
  bool FindImage(const void* mem, ImageInfo* out) {
    std::lock_guard<std::mutex> lock(mem_mu);
    auto it = images.find(const_cast<void*>(mem));
    if (it == images.end()) return false;
    *out = it->second;
    return true;
  }

 private:
  // The platform (GPUs first) and its devices' descriptions.
  void DoProbe() {
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
    platform_ = chosen;
    platform_name_ = PlatformString(api, chosen, CL_PLATFORM_NAME);
    std::string platform_version = PlatformString(api, chosen, CL_PLATFORM_VERSION);
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
      info.extensions = DeviceString(api, d, CL_DEVICE_EXTENSIONS);
      cl_bool images = 0;
      if (api.GetDeviceInfo(d, CL_DEVICE_IMAGE_SUPPORT, sizeof(images), &images, nullptr) == CL_SUCCESS && images) {
        info.image_support = true;
        api.GetDeviceInfo(d, CL_DEVICE_IMAGE2D_MAX_WIDTH, sizeof(size_t), &info.image2d_max_width, nullptr);
        api.GetDeviceInfo(d, CL_DEVICE_IMAGE2D_MAX_HEIGHT, sizeof(size_t), &info.image2d_max_height, nullptr);
        api.GetDeviceInfo(d, CL_DEVICE_IMAGE_MAX_ARRAY_SIZE, sizeof(size_t), &info.image_max_array, nullptr);
      }
      devices_.push_back(std::move(info));
    }
  }

  // The context and each device's queue.
  void DoInit() {
    const Api& api = cl::Get();
    cl_int err = CL_SUCCESS;
    std::vector<cl_device_id> ids;
    for (const DeviceInfo& d : devices_) ids.push_back(d.id);
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(platform_), 0};
    context_ = api.CreateContext(props, static_cast<cl_uint>(ids.size()), ids.data(), nullptr, nullptr, &err);
    TVMGEN_CL_CHECK(err, "clCreateContext");
    for (DeviceInfo& info : devices_) {
      info.queue = info.plain_queue = api.CreateCommandQueue(context_, info.id, 0, &err);
      TVMGEN_CL_CHECK(err, "clCreateCommandQueue");
    }
    if (LogOn()) {
      std::fprintf(stderr, "tvmgen-opencl: %s, platform %s, %zu device(s), device 0: %s (driver %s; %llu KB of "
                   "local memory and %zu threads per work-group)\n",
                   LoadedPath().c_str(), platform_name_.c_str(), devices_.size(), devices_[0].name.c_str(),
                   devices_[0].driver.c_str(), static_cast<unsigned long long>(devices_[0].local_mem / 1024),
                   devices_[0].max_work_group);
    }
  }

  struct Event {
    std::string kernel;
    int device_id;
    cl_event event;
  };

  std::mutex mu_;
  std::atomic<bool> profiling_{false};
  std::mutex events_mu_;
  std::vector<Event> events_;
  std::unordered_set<void*> profiling_streams_;
  bool initialized_ = false, probed_ = false;
  std::string init_error_;
  cl_platform_id platform_ = nullptr;
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
