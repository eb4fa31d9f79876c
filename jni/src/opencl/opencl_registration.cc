// libtvmgen_opencl's entry: the loader of the module blob TVM embeds, the description of the platform
// (tvmgen.opencl.info), the registration of every global (see opencl_module.cc's header), and the C API.
#include <algorithm>
#include <cstring>

#include "../common/backend_globals.h"
#include "../common/blob_reader.h"
#include "kernel_cache.h"
#include "program_sources.h"

namespace tvmgen {
namespace opencl {

// The module blob TVM embeds for an OpenCL module (little-endian), read with BlobReader (../common/blob_reader.h):
//   string fmt; map<string, FunctionInfo> fmap; bytes code
// string/bytes: u64 length + bytes; map: u64 count + (key, value)...; FunctionInfo: string name,
// array<DLDataType{u8 code, u8 bits, u16 lanes}> arg_types, array<string> launch_param_tags,
// array<i32> arg_extra_tags; array: u64 count + items.
constexpr const char* kBlobTruncated =
    "the OpenCL module in this library is truncated or of an unknown format (was it exported by TVM 0.27?)";

// Half-precision kernels (--precision fp16) need cl_khr_fp16: checked when the model is loaded, so the
// error names the cause instead of a driver's build log on the first run. Where OpenCL itself is
// missing, nothing is said here: the first use gives that error.
void CheckHalfPrecision() {
  Workspace& w = Workspace::Global();
  if (!w.TryInit()) return;
  const DeviceInfo& d = w.device(0);
  if (d.HasExtension("cl_khr_fp16")) return;
  TVM_FFI_THROW(RuntimeError) << "this model was compiled with --precision fp16, but OpenCL device " << d.name
                              << " (driver " << d.driver << ", platform " << w.platform_name()
                              << ") lacks cl_khr_fp16 (half precision): compile it with --precision fp32 for "
                              << "this device";
}

ffi::Module LoadFromBytes(const ffi::Bytes& bytes) {
  std::string blob(bytes.data(), bytes.size());
  BlobReader r(blob.data(), blob.size(), kBlobTruncated);
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
  if (fmt == "cl" && code.find("cl_khr_fp16 : enable") != std::string::npos) CheckHalfPrecision();
  return MakeModule(std::move(blob), std::move(fmt), std::move(fmap), std::move(code));
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
        << "\", \"version\": \"" << JsonEscape(d.version) << "\", \"fp16\": "
        << (d.HasExtension("cl_khr_fp16") ? "true" : "false") << ", \"images\": " << (d.image_support ? "true" : "false")
        << ", \"extensions\": \"" << JsonEscape(d.extensions) << "\"}";
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

struct Registration {
  Registration() {
    RegisterBackend<KernelCache, Workspace>(
        "opencl", [] { return static_cast<void*>(GlobalDeviceAPI()); }, LoadFromBytes, InfoJson, LogOn());
    ffi::Function::SetGlobal("tvmgen.opencl.reset_cache_stats",
                             ffi::Function::FromTyped([]() { KernelCache::Global().ResetStats(); }), true);
  }
};
Registration registration;

}  // namespace opencl
}  // namespace tvmgen

// ------------------------------------------------------------------ C API (for apps and JNI)
extern "C" {
/*! \brief Set the kernel cache directory ("" turns the cache off). Returns 0. */
__attribute__((visibility("default"))) int TVMGenOpenCLSetCacheDir(const char* dir) {
  return tvmgen::SetCacheDirFromC<tvmgen::opencl::KernelCache>(dir);
}
/*!
 * \brief Copy the cache statistics (JSON) into buf (size n, NUL-terminated, truncated if needed).
 * \return the length of the full JSON string.
 */
__attribute__((visibility("default"))) size_t TVMGenOpenCLCacheStats(char* buf, size_t n) {
  return tvmgen::CopyToCBuffer(tvmgen::opencl::KernelCache::Global().StatsJson(), buf, n);
}
}
