// tvmgen's own OpenCL support for the TVM 0.27 runtime (libtvmgen_opencl.so).
//
// The PyPI TVM runtime is built with OpenCL off, and an Android TVM build should not link
// libOpenCL.so (phones without it could not even load the app). Loading this library registers,
// through tvm-ffi globals:
//   device_api.opencl                   a kDLOpenCL DeviceAPI (memory, copies, streams, attributes)
//   ffi.Module.load_from_bytes.opencl   the loader of the OpenCL kernels embedded in a model library
//   tvmgen.opencl.set_cache_dir / cache_dir / cache_stats / reset_cache_stats / info
// libOpenCL is opened with dlopen on first use (cl_api.cc). Compiled programs are kept in an
// on-disk cache (see KernelCache) so the next start skips the driver's compiler.
//
// Device memory: DLTensor::data is the cl_mem itself. It is only ever handed to the OpenCL API
// (clEnqueueRead/Write/CopyBuffer, clSetKernelArg), never dereferenced on the host.
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

bool LogOn() {
  static bool on = [] {
    const char* v = std::getenv("TVMGEN_OPENCL_LOG");
    return v != nullptr && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string JsonEscape(const std::string& s) {
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

std::string DeviceString(const Api& api, cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (api.GetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  api.GetDeviceInfo(d, what, n, &s[0], nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string PlatformString(const Api& api, cl_platform_id p, cl_platform_info what) {
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

// ------------------------------------------------------------------ the kernel cache
struct CacheStats {
  std::atomic<int64_t> hits{0}, misses{0}, corrupt{0}, writes{0}, write_errors{0}, source_builds{0};
  std::atomic<int64_t> build_us{0}, load_us{0};
};

// Compiled programs on disk, one file per kernel source and device:
//   <dir>/<sha256(key)[:40]>.clbin, key = sha256(kernel source) + device name + driver version
//   + platform (OpenCL runtime) version + device version + build options + this library's version.
// File: "TVMGENCL" magic, u32 format, u64 key length, key, u64 binary length, binary, 32-byte
// sha256(binary). Anything that does not verify (or that the driver refuses) is deleted and
// rebuilt from source. Files are written to a temporary name and renamed: readers never see
// a half-written entry.
class KernelCache {
 public:
  static KernelCache& Global() {
    static KernelCache* c = new KernelCache();
    return *c;
  }

  void SetDir(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dir_ = dir;
    explicit_ = true;
  }

  // The cache directory ("" when caching is off).
  std::string Dir() {
    std::lock_guard<std::mutex> lock(mu_);
    if (explicit_) return dir_;
    if (const char* env = std::getenv("TVMGEN_OPENCL_CACHE_DIR")) return env;  // "" turns it off
    if (const char* x = std::getenv("XDG_CACHE_HOME")) {
      if (*x) return std::string(x) + "/tvmgen/opencl";
    }
    if (const char* h = std::getenv("HOME")) {
      if (*h) return std::string(h) + "/.cache/tvmgen/opencl";
    }
    return "";  // Android apps: call tvmgen.opencl.set_cache_dir(context.getCacheDir() + ...)
  }

  static std::string Key(const std::string& source_sha, const DeviceInfo& d, const std::string& options) {
    return std::string(kVersion) + "\nsource-sha256=" + source_sha + "\ndevice=" + d.name + "\nvendor=" +
           d.vendor + "\ndriver=" + d.driver + "\ndevice-version=" + d.version + "\nplatform-version=" +
           d.platform_version + "\noptions=" + options + "\ntvm=" + TVM_VERSION + "\n";
  }

  std::string PathFor(const std::string& dir, const std::string& key) {
    return dir + "/" + Sha256Hex(key).substr(0, 40) + ".clbin";
  }

  // The binary stored for key, or "" (a miss, or an entry that failed verification: deleted).
  std::string Read(const std::string& key, std::string* path_out) {
    std::string dir = Dir();
    if (dir.empty()) return "";
    std::string path = PathFor(dir, key);
    *path_out = path;
    std::ifstream f(path, std::ios::binary);
    if (!f) return "";
    std::stringstream ss;
    ss << f.rdbuf();
    std::string data = ss.str();
    std::string why;
    std::string binary = Parse(data, key, &why);
    if (binary.empty()) {
      Discard(path, why);
      return "";
    }
    return binary;
  }

  void Discard(const std::string& path, const std::string& why) {
    stats.corrupt++;
    std::remove(path.c_str());
    if (LogOn()) std::fprintf(stderr, "tvmgen-opencl: cache entry %s is unusable (%s): rebuilt\n", path.c_str(), why.c_str());
  }

  void Write(const std::string& key, const std::string& binary) {
    std::string dir = Dir();
    if (dir.empty() || binary.empty()) return;
    if (!MakeDirs(dir)) {
      stats.write_errors++;
      if (LogOn()) std::fprintf(stderr, "tvmgen-opencl: cannot create cache directory %s\n", dir.c_str());
      return;
    }
    std::string path = PathFor(dir, key);
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    std::string blob = "TVMGENCL";
    AppendU32(&blob, 1);
    AppendU64(&blob, key.size());
    blob += key;
    AppendU64(&blob, binary.size());
    blob += binary;
    blob += Sha256(binary.data(), binary.size());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(blob.data(), static_cast<std::streamsize>(blob.size()));
      if (!f) {
        stats.write_errors++;
        std::remove(tmp.c_str());
        return;
      }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      stats.write_errors++;
      std::remove(tmp.c_str());
      return;
    }
    stats.writes++;
  }

  std::string StatsJson() {
    std::ostringstream o;
    o << "{\"hits\": " << stats.hits << ", \"misses\": " << stats.misses << ", \"corrupt\": " << stats.corrupt
      << ", \"writes\": " << stats.writes << ", \"write_errors\": " << stats.write_errors
      << ", \"source_builds\": " << stats.source_builds << ", \"build_ms\": " << stats.build_us / 1000.0
      << ", \"load_ms\": " << stats.load_us / 1000.0 << ", \"dir\": \"" << JsonEscape(Dir()) << "\"}";
    return o.str();
  }

  void ResetStats() {
    stats.hits = stats.misses = stats.corrupt = stats.writes = stats.write_errors = stats.source_builds = 0;
    stats.build_us = stats.load_us = 0;
  }

  CacheStats stats;

 private:
  static void AppendU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
  static void AppendU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

  static std::string Parse(const std::string& d, const std::string& key, std::string* why) {
    size_t pos = 0;
    auto take = [&](size_t n) -> const char* {
      if (d.size() - pos < n) return nullptr;
      const char* p = d.data() + pos;
      pos += n;
      return p;
    };
    const char* magic = take(8);
    if (!magic || std::memcmp(magic, "TVMGENCL", 8) != 0) return *why = "bad magic", "";
    const char* fmt = take(4);
    uint32_t format = 0;
    if (fmt) std::memcpy(&format, fmt, 4);
    if (format != 1) return *why = "unknown format", "";
    uint64_t klen = 0;
    const char* p = take(8);
    if (!p) return *why = "truncated", "";
    std::memcpy(&klen, p, 8);
    if (klen > d.size()) return *why = "truncated", "";
    const char* k = take(klen);
    if (!k || std::string(k, klen) != key) return *why = "stale key", "";
    uint64_t blen = 0;
    p = take(8);
    if (!p) return *why = "truncated", "";
    std::memcpy(&blen, p, 8);
    if (blen == 0 || blen > d.size()) return *why = "truncated", "";
    const char* b = take(blen);
    const char* sum = take(32);
    if (!b || !sum) return *why = "truncated", "";
    if (pos != d.size()) return *why = "trailing bytes", "";
    if (Sha256(b, blen) != std::string(sum, 32)) return *why = "checksum mismatch", "";
    return std::string(b, blen);
  }

  static bool MakeDirs(const std::string& dir) {
    std::string cur;
    for (size_t i = 0; i <= dir.size(); ++i) {
      if (i == dir.size() || dir[i] == '/') {
        if (!cur.empty()) mkdir(cur.c_str(), 0755);
      }
      if (i < dir.size()) cur += dir[i];
    }
    struct stat st;
    return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  std::mutex mu_;
  std::string dir_;
  bool explicit_ = false;
};

std::string BuildLog(const Api& api, cl_program prog, cl_device_id dev) {
  size_t n = 0;
  api.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) api.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
  return log;
}

// The compiled binary of `prog` for `dev` ("" when the driver gives none).
std::string ProgramBinary(const Api& api, cl_program prog, cl_device_id dev) {
  cl_uint n = 0;
  if (api.GetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof(n), &n, nullptr) != CL_SUCCESS || n == 0) return "";
  std::vector<cl_device_id> devs(n);
  api.GetProgramInfo(prog, CL_PROGRAM_DEVICES, n * sizeof(cl_device_id), devs.data(), nullptr);
  std::vector<size_t> sizes(n, 0);
  if (api.GetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, n * sizeof(size_t), sizes.data(), nullptr) != CL_SUCCESS) return "";
  std::vector<std::string> bins(n);
  std::vector<unsigned char*> ptrs(n, nullptr);
  for (cl_uint i = 0; i < n; ++i) {
    bins[i].resize(sizes[i]);
    ptrs[i] = sizes[i] ? reinterpret_cast<unsigned char*>(&bins[i][0]) : nullptr;
  }
  if (api.GetProgramInfo(prog, CL_PROGRAM_BINARIES, n * sizeof(unsigned char*), ptrs.data(), nullptr) != CL_SUCCESS) return "";
  for (cl_uint i = 0; i < n; ++i) {
    if (devs[i] == dev) return bins[i];
  }
  return "";
}

// A built program for one kernel source on one device: from the cache when it verifies and the
// driver accepts it, otherwise compiled from source (and stored).
cl_program BuildProgram(const std::string& source, int device_id, const std::string& what) {
  Workspace& w = Workspace::Global();
  const Api& api = cl::Get();
  DeviceInfo& dev = w.device(device_id);
  KernelCache& cache = KernelCache::Global();
  const std::string options;
  std::string key = KernelCache::Key(Sha256Hex(source), dev, options);
  std::string path;
  auto t0 = std::chrono::steady_clock::now();
  std::string binary = cache.Read(key, &path);
  if (!binary.empty()) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(binary.data());
    size_t len = binary.size();
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    cl_program prog = api.CreateProgramWithBinary(w.context(), 1, &dev.id, &len, &b, &status, &err);
    if (err == CL_SUCCESS && status == CL_SUCCESS && prog != nullptr) {
      err = api.BuildProgram(prog, 1, &dev.id, options.c_str(), nullptr, nullptr);
      if (err == CL_SUCCESS) {
        cache.stats.hits++;
        cache.stats.load_us += static_cast<int64_t>(MsSince(t0) * 1000);
        return prog;
      }
    }
    if (prog != nullptr) api.ReleaseProgram(prog);
    cache.Discard(path, std::string("the driver refused the binary: ") + ErrorName(err != CL_SUCCESS ? err : status));
  }
  cache.stats.misses++;
  const char* src = source.c_str();
  size_t len = source.size();
  cl_int err = CL_SUCCESS;
  cl_program prog = api.CreateProgramWithSource(w.context(), 1, &src, &len, &err);
  TVMGEN_CL_CHECK(err, "clCreateProgramWithSource");
  err = api.BuildProgram(prog, 1, &dev.id, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    std::string log = BuildLog(api, prog, dev.id);
    api.ReleaseProgram(prog);
    TVM_FFI_THROW(RuntimeError) << "OpenCL: building " << what << " for " << dev.name << " failed ("
                                << ErrorName(err) << "):\n" << log;
  }
  cache.stats.source_builds++;
  cache.stats.build_us += static_cast<int64_t>(MsSince(t0) * 1000);
  cache.Write(key, ProgramBinary(api, prog, dev.id));
  return prog;
}

// ------------------------------------------------------------------ the device API
thread_local int current_device = 0;

class OpenCLDeviceAPI final : public DeviceAPI {
 public:
  static OpenCLDeviceAPI* Global() {
    static OpenCLDeviceAPI* api = new OpenCLDeviceAPI();  // TVM keeps the pointer forever
    return api;
  }

  void SetDevice(DLDevice dev) final { current_device = dev.device_id; }

  void GetAttr(DLDevice dev, DeviceAttrKind kind, ffi::Any* rv) final {
    Workspace& w = Workspace::Global();
    if (kind == tvm::runtime::kExist) {
      *rv = static_cast<int64_t>(w.TryInit() && dev.device_id >= 0 &&
                                 dev.device_id < static_cast<int>(w.num_devices()));
      return;
    }
    if (!w.TryInit() || dev.device_id < 0 || dev.device_id >= static_cast<int>(w.num_devices())) return;
    const DeviceInfo& d = w.device(dev.device_id);
    switch (kind) {
      case tvm::runtime::kMaxThreadsPerBlock: *rv = static_cast<int64_t>(d.max_work_group); break;
      case tvm::runtime::kWarpSize: *rv = static_cast<int64_t>(1); break;  // no warp in OpenCL
      case tvm::runtime::kMaxSharedMemoryPerBlock: *rv = static_cast<int64_t>(d.local_mem); break;
      case tvm::runtime::kComputeVersion: *rv = ffi::String(d.version); break;
      case tvm::runtime::kDeviceName: *rv = ffi::String(d.name); break;
      case tvm::runtime::kMaxClockRate: *rv = static_cast<int64_t>(d.clock_mhz) * 1000; break;  // kHz, as TVM
      case tvm::runtime::kMultiProcessorCount: *rv = static_cast<int64_t>(d.compute_units); break;
      case tvm::runtime::kMaxThreadDimensions: {
        std::ostringstream o;
        o << "[";
        for (size_t i = 0; i < d.max_work_items.size() && i < 3; ++i) o << (i ? ", " : "") << d.max_work_items[i];
        o << "]";
        *rv = ffi::String(o.str());
        break;
      }
      case tvm::runtime::kDriverVersion: *rv = ffi::String(d.driver); break;
      case tvm::runtime::kApiVersion: *rv = ffi::String(d.platform_version); break;
      case tvm::runtime::kTotalGlobalMemory: *rv = static_cast<int64_t>(d.global_mem); break;
      default: break;  // unknown: None
    }
  }

  void* AllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) final {
    return AllocBuffer(dev, nbytes, false);
  }

  // host_visible: CL_MEM_ALLOC_HOST_PTR (memory scope "global.host"), recorded in w.host_visible.
  void* AllocBuffer(DLDevice dev, size_t nbytes, bool host_visible) {
    Workspace& w = Workspace::Global();
    w.device(dev.device_id);  // initialises, checks the id
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = CL_MEM_READ_WRITE | (host_visible ? CL_MEM_ALLOC_HOST_PTR : 0);
    // A zero-size buffer is invalid in OpenCL: give it one byte.
    cl_mem m = cl::Get().CreateBuffer(w.context(), flags, nbytes ? nbytes : 1, nullptr, &err);
    if (err != CL_SUCCESS || m == nullptr) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL: allocating " << nbytes << " bytes on "
                                  << w.device(dev.device_id).name << " failed: " << ErrorName(err);
    }
    std::lock_guard<std::mutex> lock(w.mem_mu);
    w.sizes[m] = nbytes;
    if (host_visible) w.host_visible.insert(m);
    return m;
  }

  void* AllocDataSpace(DLDevice dev, int ndim, const int64_t* shape, DLDataType dtype,
                       ffi::Optional<ffi::String> mem_scope) final {
    bool host_visible = mem_scope.has_value() && mem_scope.value() == "global.host";
    if (mem_scope.has_value() && !mem_scope.value().empty() && mem_scope.value() != "global" && !host_visible) {
      TVM_FFI_THROW(RuntimeError) << "tvmgen's OpenCL runtime supports buffer memory only, not the memory scope \""
                                  << mem_scope.value() << "\" (texture memory, used by --gpu-family adreno): "
                                  << "compile with --gpu-family generic";
    }
    size_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
    size_t nbytes = n * ((dtype.bits * dtype.lanes + 7) / 8);
    return AllocBuffer(dev, nbytes, host_visible);
  }

  void FreeDataSpace(DLDevice dev, void* ptr) final {
    if (ptr == nullptr) return;
    Workspace& w = Workspace::Global();
    {
      std::lock_guard<std::mutex> lock(w.mem_mu);
      w.sizes.erase(ptr);
      w.host_visible.erase(ptr);
    }
    // Kernels using the buffer may still be queued: OpenCL keeps it alive until they finish.
    cl::Get().ReleaseMemObject(static_cast<cl_mem>(ptr));
  }

  size_t GetDataSize(const DLTensor& arr, ffi::Optional<ffi::String> mem_scope) final {
    if (mem_scope.has_value() && !mem_scope.value().empty() && mem_scope.value() != "global" &&
        mem_scope.value() != "global.host") {
      TVM_FFI_THROW(RuntimeError) << "tvmgen's OpenCL runtime does not support the memory scope \""
                                  << mem_scope.value() << "\" (compile with --gpu-family generic)";
    }
    size_t n = 1;
    for (int i = 0; i < arr.ndim; ++i) n *= static_cast<size_t>(arr.shape[i]);
    return n * ((arr.dtype.bits * arr.dtype.lanes + 7) / 8);
  }

  void CopyDataFromTo(DLTensor* from, DLTensor* to, TVMStreamHandle stream) final {
    size_t nbytes = GetDataSize(*from, std::nullopt);
    if (nbytes != GetDataSize(*to, std::nullopt)) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL copy: the source holds " << nbytes << " bytes, the target "
                                  << GetDataSize(*to, std::nullopt);
    }
    if (!Compact(*from) || !Compact(*to)) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL copy: only compact (contiguous) tensors can be copied";
    }
    Copy(from->data, from->byte_offset, to->data, to->byte_offset, nbytes, from->device, to->device, stream);
  }

  void StreamSync(DLDevice dev, TVMStreamHandle stream) final {
    TVMGEN_CL_CHECK(cl::Get().Finish(Workspace::Global().Queue(dev.device_id, stream)), "clFinish");
  }

  TVMStreamHandle CreateStream(DLDevice dev) final {
    Workspace& w = Workspace::Global();
    cl_int err = CL_SUCCESS;
    cl_command_queue q = cl::Get().CreateCommandQueue(w.context(), w.device(dev.device_id).id, 0, &err);
    TVMGEN_CL_CHECK(err, "clCreateCommandQueue");
    return q;
  }

  void FreeStream(DLDevice dev, TVMStreamHandle stream) final {
    if (stream != nullptr) cl::Get().ReleaseCommandQueue(static_cast<cl_command_queue>(stream));
  }

  void SyncStreamFromTo(DLDevice dev, TVMStreamHandle src, TVMStreamHandle dst) final {
    StreamSync(dev, src);  // in-order queues: finishing the source orders everything after it
  }

  // Workspaces (temporary buffers of host-side kernels): reused by size, smallest fit first.
  void* AllocWorkspace(DLDevice dev, size_t nbytes, DLDataType type_hint) final {
    Workspace& w = Workspace::Global();
    {
      std::lock_guard<std::mutex> lock(w.mem_mu);
      auto it = w.free_workspace.lower_bound(nbytes);
      if (it != w.free_workspace.end() && it->first <= nbytes * 2 + 4096) {
        void* p = it->second;
        w.free_workspace.erase(it);
        return p;
      }
    }
    return AllocDataSpace(dev, nbytes, tvm::runtime::kTempAllocaAlignment, type_hint);
  }

  void FreeWorkspace(DLDevice dev, void* ptr) final {
    if (ptr == nullptr) return;
    Workspace& w = Workspace::Global();
    std::lock_guard<std::mutex> lock(w.mem_mu);
    auto it = w.sizes.find(ptr);
    if (it == w.sizes.end()) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL: FreeWorkspace of a pointer this runtime did not allocate";
    }
    w.free_workspace.emplace(it->second, ptr);
  }

  bool SupportsDevicePointerArithmeticsOnHost() final { return false; }

 protected:
  void CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t nbytes,
                      DLDevice dev_from, DLDevice dev_to, DLDataType type_hint, TVMStreamHandle stream) final {
    Copy(from, from_offset, to, to_offset, nbytes, dev_from, dev_to, stream);
  }

 private:
  // A "global.host" buffer that can be mapped (the library has clEnqueueMapBuffer / Unmap).
  static bool Mapped(const void* mem) {
    const Api& api = cl::Get();
    if (api.EnqueueMapBuffer == nullptr || api.EnqueueUnmapMemObject == nullptr) return false;
    Workspace& w = Workspace::Global();
    std::lock_guard<std::mutex> lock(w.mem_mu);
    return w.host_visible.count(const_cast<void*>(mem)) != 0;
  }

  static bool Compact(const DLTensor& t) {
    if (t.strides == nullptr) return true;
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect) return false;
      expect *= t.shape[i];
    }
    return true;
  }

  void Copy(const void* from, size_t from_offset, void* to, size_t to_offset, size_t nbytes, DLDevice dev_from,
            DLDevice dev_to, TVMStreamHandle stream) {
    if (nbytes == 0) return;
    const Api& api = cl::Get();
    Workspace& w = Workspace::Global();
    bool from_cl = dev_from.device_type == kDLOpenCL, to_cl = dev_to.device_type == kDLOpenCL;
    bool from_host = dev_from.device_type == kDLCPU || dev_from.device_type == kDLCUDAHost;
    bool to_host = dev_to.device_type == kDLCPU || dev_to.device_type == kDLCUDAHost;
    if (from_cl && to_cl) {
      cl_command_queue q = w.Queue(dev_from.device_id, stream);
      TVMGEN_CL_CHECK(api.EnqueueCopyBuffer(q, static_cast<cl_mem>(const_cast<void*>(from)), static_cast<cl_mem>(to),
                                            from_offset, to_offset, nbytes, 0, nullptr, nullptr),
                      "clEnqueueCopyBuffer");
      if (dev_from.device_id != dev_to.device_id) TVMGEN_CL_CHECK(api.Finish(q), "clFinish");
    } else if (from_cl && to_host && Mapped(from)) {
      cl_command_queue q = w.Queue(dev_from.device_id, stream);
      cl_mem m = static_cast<cl_mem>(const_cast<void*>(from));
      cl_int err = CL_SUCCESS;
      void* p = api.EnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ, from_offset, nbytes, 0, nullptr, nullptr, &err);
      TVMGEN_CL_CHECK(err, "clEnqueueMapBuffer (host-visible buffer to host)");
      std::memcpy(static_cast<char*>(to) + to_offset, p, nbytes);
      TVMGEN_CL_CHECK(api.EnqueueUnmapMemObject(q, m, p, 0, nullptr, nullptr), "clEnqueueUnmapMemObject");
    } else if (from_host && to_cl && Mapped(to)) {
      cl_command_queue q = w.Queue(dev_to.device_id, stream);
      cl_mem m = static_cast<cl_mem>(to);
      cl_int err = CL_SUCCESS;
      // Blocking map: waits for the kernels queued before it (in-order queue) that use the buffer.
      void* p = api.EnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_WRITE, to_offset, nbytes, 0, nullptr, nullptr, &err);
      TVMGEN_CL_CHECK(err, "clEnqueueMapBuffer (host to host-visible buffer)");
      std::memcpy(p, static_cast<const char*>(from) + from_offset, nbytes);
      // The unmap is queued before any later kernel on this queue: they see the new bytes.
      TVMGEN_CL_CHECK(api.EnqueueUnmapMemObject(q, m, p, 0, nullptr, nullptr), "clEnqueueUnmapMemObject");
    } else if (from_cl && to_host) {
      cl_command_queue q = w.Queue(dev_from.device_id, stream);
      TVMGEN_CL_CHECK(api.EnqueueReadBuffer(q, static_cast<cl_mem>(const_cast<void*>(from)), CL_TRUE, from_offset,
                                            nbytes, static_cast<char*>(to) + to_offset, 0, nullptr, nullptr),
                      "clEnqueueReadBuffer (device to host)");
    } else if (from_host && to_cl) {
      cl_command_queue q = w.Queue(dev_to.device_id, stream);
      TVMGEN_CL_CHECK(api.EnqueueWriteBuffer(q, static_cast<cl_mem>(to), CL_TRUE, to_offset, nbytes,
                                             static_cast<const char*>(from) + from_offset, 0, nullptr, nullptr),
                      "clEnqueueWriteBuffer (host to device)");
    } else {
      TVM_FFI_THROW(RuntimeError) << "OpenCL: cannot copy from device type " << dev_from.device_type
                                  << " to device type " << dev_to.device_type;
    }
  }
};

// ------------------------------------------------------------------ the kernel module
struct FunctionInfo {
  std::string name;
  std::vector<DLDataType> arg_types;
  std::vector<std::string> launch_tags;
};

// Reader of the module blob TVM embeds for an OpenCL module (little-endian):
//   string fmt; map<string, FunctionInfo> fmap; bytes code
// string/bytes: u64 length + bytes; map: u64 count + (key, value)...; FunctionInfo: string name,
// array<DLDataType{u8 code, u8 bits, u16 lanes}> arg_types, array<string> launch_param_tags,
// array<i32> arg_extra_tags; array: u64 count + items.
class BlobReader {
 public:
  BlobReader(const char* data, size_t size) : p_(data), end_(data + size) {}
  const char* Take(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) {
      TVM_FFI_THROW(RuntimeError) << "the OpenCL module in this library is truncated or of an unknown format "
                                  << "(was it exported by TVM 0.27?)";
    }
    const char* q = p_;
    p_ += n;
    return q;
  }
  template <typename T>
  T Pod() {
    T v;
    std::memcpy(&v, Take(sizeof(T)), sizeof(T));
    return v;
  }
  uint64_t Count() {
    uint64_t n = Pod<uint64_t>();
    if (n > static_cast<uint64_t>(end_ - p_)) Take(n);  // throws: more items than bytes left
    return n;
  }
  std::string Str() {
    uint64_t n = Count();
    return std::string(Take(n), n);
  }
  bool Done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

// Splits TVM's OpenCL source into kernels at its "// Function: NAME" lines.
std::unordered_map<std::string, std::string> SplitSource(const std::string& src) {
  static const std::string marker = "// Function: ";
  std::unordered_map<std::string, std::string> out;
  size_t pos = src.find(marker);
  while (pos != std::string::npos) {
    size_t name_begin = pos + marker.size();
    size_t eol = src.find('\n', name_begin);
    if (eol == std::string::npos) break;
    std::string name = src.substr(name_begin, eol - name_begin);
    while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
    size_t next = src.find(marker, eol + 1);
    out[name] = src.substr(eol + 1, next == std::string::npos ? std::string::npos : next - eol - 1);
    pos = next;
  }
  return out;
}

class OpenCLModule : public ffi::ModuleObj {
 public:
  OpenCLModule(std::string blob, std::string fmt, std::map<std::string, FunctionInfo> fmap, std::string code)
      : blob_(std::move(blob)), fmt_(std::move(fmt)), fmap_(std::move(fmap)), code_(std::move(code)) {
    if (fmt_ == "cl") {
      sources_ = SplitSource(code_);
      for (const auto& kv : fmap_) {
        if (!sources_.count(kv.first)) {
          // no per-kernel markers (hand-made module): build the whole source as one program
          sources_.clear();
          break;
        }
      }
    }
  }

  ~OpenCLModule() {
    if (!Available()) return;
    const Api& api = cl::Get();
    for (auto& kv : kernels_) {
      for (cl_kernel k : kv.second) if (k) api.ReleaseKernel(k);
    }
    for (auto& kv : programs_) {
      for (cl_program p : kv.second) if (p) api.ReleaseProgram(p);
    }
  }

  const char* kind() const final { return "opencl"; }
  int GetPropertyMask() const final { return ffi::Module::kBinarySerializable | ffi::Module::kRunnable; }
  ffi::Bytes SaveToBytes() const final { return ffi::Bytes(blob_.data(), blob_.size()); }
  ffi::String InspectSource(const ffi::String& format) const final {
    return fmt_ == "cl" ? ffi::String(code_) : ffi::String();
  }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    auto it = fmap_.find(std::string(name));
    if (it == fmap_.end()) return std::nullopt;
    const FunctionInfo* info = &it->second;
    std::vector<size_t> sizes;
    for (const DLDataType& t : info->arg_types) {
      if (t.lanes != 1) TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": vector argument types are not supported";
      sizes.push_back(t.code == kDLOpaqueHandle ? sizeof(cl_mem) : static_cast<size_t>((t.bits + 7) / 8));
    }
    // launch_param_tags -> index into work sizes: blockIdx.{x,y,z} 0..2, threadIdx.{x,y,z} 3..5
    std::vector<int> slots;
    bool dyn_shared = false;
    int work_dim = 1;
    for (const std::string& tag : info->launch_tags) {
      if (tag.rfind("blockIdx.", 0) == 0 && tag.size() == 10) {
        slots.push_back(tag[9] - 'x');
      } else if (tag.rfind("threadIdx.", 0) == 0 && tag.size() == 11) {
        slots.push_back(3 + tag[10] - 'x');
      } else if (tag == "tirx.use_dyn_shared_memory" || tag == "tir.use_dyn_shared_memory") {
        dyn_shared = true;  // OpenCL kernels declare their __local memory: the size is read and unused
      } else {
        slots.push_back(-1);  // other launch hints (cluster, cooperative ...): read and ignored
      }
      int s = slots.empty() ? -1 : slots.back();
      if (s >= 0) work_dim = std::max(work_dim, s % 3 + 1);
    }
    ffi::ObjectPtr<ffi::Object> self = ffi::GetObjectPtr<ffi::Object>(this);
    std::string fname = std::string(name);
    return ffi::Function::FromPacked([self, this, info, sizes, slots, dyn_shared, work_dim, fname](
                                         ffi::PackedArgs args, ffi::Any* rv) {
      Launch(fname, *info, sizes, slots, dyn_shared, work_dim, args);
    });
  }

 private:
  cl_kernel Kernel(const std::string& name, int device_id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& ks = kernels_[name];
    if (ks.size() <= static_cast<size_t>(device_id)) ks.resize(device_id + 1, nullptr);
    if (ks[device_id]) return ks[device_id];
    const Api& api = cl::Get();
    std::string prog_key = sources_.empty() ? std::string("\x01whole") : name;
    auto& ps = programs_[prog_key];
    if (ps.size() <= static_cast<size_t>(device_id)) ps.resize(device_id + 1, nullptr);
    if (ps[device_id] == nullptr) {
      if (fmt_ != "cl") {
        Workspace& w = Workspace::Global();
        DeviceInfo& dev = w.device(device_id);
        const unsigned char* b = reinterpret_cast<const unsigned char*>(code_.data());
        size_t len = code_.size();
        cl_int status = CL_SUCCESS, err = CL_SUCCESS;
        cl_program p = api.CreateProgramWithBinary(w.context(), 1, &dev.id, &len, &b, &status, &err);
        TVMGEN_CL_CHECK(err, "clCreateProgramWithBinary (" + fmt_ + ")");
        TVMGEN_CL_CHECK(api.BuildProgram(p, 1, &dev.id, "", nullptr, nullptr), "clBuildProgram (" + fmt_ + ")");
        ps[device_id] = p;
      } else {
        ps[device_id] = BuildProgram(sources_.empty() ? code_ : sources_.at(name), device_id, "kernel " + name);
      }
    }
    cl_int err = CL_SUCCESS;
    cl_kernel k = api.CreateKernel(ps[device_id], name.c_str(), &err);
    TVMGEN_CL_CHECK(err, "clCreateKernel(" + name + ")");
    ks[device_id] = k;
    return k;
  }

  void Launch(const std::string& name, const FunctionInfo& info, const std::vector<size_t>& sizes,
              const std::vector<int>& slots, bool dyn_shared, int work_dim, ffi::PackedArgs args) {
    size_t nargs = info.arg_types.size();
    size_t need = nargs + slots.size() + (dyn_shared ? 1 : 0);
    if (static_cast<size_t>(args.size()) < need) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << " takes " << need << " arguments, "
                                  << args.size() << " were given";
    }
    int device_id = current_device;
    cl_kernel kernel = Kernel(name, device_id);
    const Api& api = cl::Get();
    std::lock_guard<std::mutex> lock(launch_mu_);  // clSetKernelArg + enqueue: one caller at a time
    for (size_t i = 0; i < nargs; ++i) {
      const DLDataType& t = info.arg_types[i];
      cl_int err;
      if (t.code == kDLOpaqueHandle) {
        // Host code passes the buffers' data pointers (the cl_mem handles) as opaque pointers.
        const TVMFFIAny& raw = reinterpret_cast<const TVMFFIAny*>(args.data())[i];
        void* ptr = nullptr;
        if (raw.type_index == ffi::TypeIndex::kTVMFFIOpaquePtr) {
          ptr = raw.v_ptr;
        } else if (raw.type_index == ffi::TypeIndex::kTVMFFIDLTensorPtr) {
          ptr = static_cast<DLTensor*>(raw.v_ptr)->data;
        } else if (auto tensor = args[i].try_cast<ffi::Tensor>()) {
          ptr = tensor->data_ptr();
        } else if (raw.type_index != ffi::TypeIndex::kTVMFFINone) {
          TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": argument " << i << " should be a buffer, got "
                                      << args[i].GetTypeKey();
        }
        cl_mem m = static_cast<cl_mem>(ptr);
        err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), sizeof(cl_mem), &m);
      } else if (t.code == kDLFloat) {
        double v = args[i].cast<double>();
        if (t.bits == 32) {
          float f = static_cast<float>(v);
          err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), 4, &f);
        } else if (t.bits == 64) {
          err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), 8, &v);
        } else {
          TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": float" << int(t.bits) << " scalar arguments are not supported";
        }
      } else {
        int64_t v = 0;
        if (auto x = args[i].try_cast<int64_t>()) {
          v = *x;
        } else {
          v = args[i].cast<bool>();
        }
        unsigned char buf[8];
        if (sizes[i] == 1) { int8_t x = static_cast<int8_t>(v); std::memcpy(buf, &x, 1); }
        else if (sizes[i] == 2) { int16_t x = static_cast<int16_t>(v); std::memcpy(buf, &x, 2); }
        else if (sizes[i] == 4) { int32_t x = static_cast<int32_t>(v); std::memcpy(buf, &x, 4); }
        else { std::memcpy(buf, &v, 8); }
        err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), sizes[i], buf);
      }
      if (err != CL_SUCCESS) {
        TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": clSetKernelArg(" << i << ") failed: " << ErrorName(err);
      }
    }
    size_t work[6] = {1, 1, 1, 1, 1, 1};
    for (size_t j = 0; j < slots.size(); ++j) {
      if (slots[j] < 0) continue;
      int64_t v = args[nargs + j].cast<int64_t>();
      if (v > 0) work[slots[j]] = static_cast<size_t>(v);  // a 0 extent (dynamic shape) launches 1
    }
    size_t global[3], local[3];
    for (int d = 0; d < 3; ++d) {
      global[d] = work[d] * work[3 + d];
      local[d] = work[3 + d];
    }
    cl_command_queue q = Workspace::Global().Queue(device_id, TVMFFIEnvGetStream(kDLOpenCL, device_id));
    cl_int err = api.EnqueueNDRangeKernel(q, kernel, static_cast<cl_uint>(work_dim), nullptr, global, local, 0,
                                          nullptr, nullptr);
    if (err != CL_SUCCESS) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": launch failed: " << ErrorName(err) << " (global "
                                  << global[0] << "x" << global[1] << "x" << global[2] << ", local " << local[0]
                                  << "x" << local[1] << "x" << local[2] << ")";
    }
  }

  std::string blob_, fmt_;
  std::map<std::string, FunctionInfo> fmap_;
  std::string code_;
  std::unordered_map<std::string, std::string> sources_;
  std::mutex mu_, launch_mu_;
  std::unordered_map<std::string, std::vector<cl_program>> programs_;
  std::unordered_map<std::string, std::vector<cl_kernel>> kernels_;
};

ffi::Module LoadFromBytes(const ffi::Bytes& bytes) {
  std::string blob(bytes.data(), bytes.size());
  BlobReader r(blob.data(), blob.size());
  std::string fmt = r.Str();
  uint64_t n = r.Count();
  std::map<std::string, FunctionInfo> fmap;
  for (uint64_t i = 0; i < n; ++i) {
    std::string key = r.Str();
    FunctionInfo info;
    info.name = r.Str();
    uint64_t na = r.Count();
    for (uint64_t j = 0; j < na; ++j) {
      DLDataType t;
      t.code = r.Pod<uint8_t>();
      t.bits = r.Pod<uint8_t>();
      t.lanes = r.Pod<uint16_t>();
      info.arg_types.push_back(t);
    }
    uint64_t nt = r.Count();
    for (uint64_t j = 0; j < nt; ++j) info.launch_tags.push_back(r.Str());
    uint64_t ne = r.Count();
    for (uint64_t j = 0; j < ne; ++j) {
      int32_t tag = r.Pod<int32_t>();
      if (tag != 0) TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << key << ": argument tag " << tag << " is not supported";
    }
    fmap[key] = std::move(info);
  }
  std::string code = r.Str();
  if (!r.Done()) {
    TVM_FFI_THROW(RuntimeError) << "the OpenCL module in this library has trailing bytes: unknown format "
                                << "(was it exported by TVM 0.27?)";
  }
  if (fmt != "cl" && fmt != "xclbin" && fmt != "awsxclbin" && fmt != "aocx") {
    TVM_FFI_THROW(RuntimeError) << "OpenCL module format \"" << fmt << "\" is not supported";
  }
  auto node = ffi::make_object<OpenCLModule>(std::move(blob), std::move(fmt), std::move(fmap), std::move(code));
  return ffi::Module(node);
}

std::string InfoJson() {
  std::ostringstream o;
  Workspace& w = Workspace::Global();
  bool ok = w.TryInit();
  o << "{\"library\": \"" << JsonEscape(LoadedPath()) << "\", \"available\": " << (ok ? "true" : "false");
  if (ok) {
    o << ", \"platform\": \"" << JsonEscape(w.platform_name()) << "\", \"devices\": [";
    for (size_t i = 0; i < w.num_devices(); ++i) {
      const DeviceInfo& d = w.device(static_cast<int>(i));
      o << (i ? ", " : "") << "{\"name\": \"" << JsonEscape(d.name) << "\", \"driver\": \"" << JsonEscape(d.driver)
        << "\", \"version\": \"" << JsonEscape(d.version) << "\"}";
    }
    o << "]";
  } else {
    try {
      w.Init();
    } catch (const ffi::Error& e) {
      o << ", \"error\": \"" << JsonEscape(e.message()) << "\"";
    }
  }
  o << "}";
  return o.str();
}

void PrintStatsAtExit() {
  std::fprintf(stderr, "tvmgen-opencl: cache %s\n", KernelCache::Global().StatsJson().c_str());
}

struct Registration {
  Registration() {
    auto set = [](const char* name, ffi::Function f) { ffi::Function::SetGlobal(name, std::move(f), true); };
    set("device_api.opencl", ffi::Function::FromTyped([]() -> void* {
          return static_cast<DeviceAPI*>(OpenCLDeviceAPI::Global());
        }));
    set("ffi.Module.load_from_bytes.opencl", ffi::Function::FromTyped(LoadFromBytes));
    set("tvmgen.opencl.set_cache_dir",
        ffi::Function::FromTyped([](ffi::String dir) { KernelCache::Global().SetDir(std::string(dir)); }));
    set("tvmgen.opencl.cache_dir", ffi::Function::FromTyped([]() { return ffi::String(KernelCache::Global().Dir()); }));
    set("tvmgen.opencl.cache_stats",
        ffi::Function::FromTyped([]() { return ffi::String(KernelCache::Global().StatsJson()); }));
    set("tvmgen.opencl.reset_cache_stats", ffi::Function::FromTyped([]() { KernelCache::Global().ResetStats(); }));
    set("tvmgen.opencl.info", ffi::Function::FromTyped([]() { return ffi::String(InfoJson()); }));
    if (LogOn()) std::atexit(PrintStatsAtExit);
  }
};
Registration registration;

}  // namespace opencl
}  // namespace tvmgen

// ------------------------------------------------------------------ C API (for apps and JNI)
extern "C" {
/*! \brief Set the kernel cache directory ("" turns the cache off). Returns 0. */
__attribute__((visibility("default"))) int TVMGenOpenCLSetCacheDir(const char* dir) {
  tvmgen::opencl::KernelCache::Global().SetDir(dir ? dir : "");
  return 0;
}
/*!
 * \brief Copy the cache statistics (JSON) into buf (size n, NUL-terminated, truncated if needed).
 * \return the length of the full JSON string.
 */
__attribute__((visibility("default"))) size_t TVMGenOpenCLCacheStats(char* buf, size_t n) {
  std::string s = tvmgen::opencl::KernelCache::Global().StatsJson();
  if (buf && n) {
    size_t k = std::min(n - 1, s.size());
    std::memcpy(buf, s.data(), k);
    buf[k] = '\0';
  }
  return s.size();
}
}
