// The global functions and the C API that both GPU backends (libtvmgen_opencl, libtvmgen_vulkan) give,
// written once: their DeviceAPI, module loader and description, their on-disk cache's directory and
// statistics, and their profiling mode.
#pragma once

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tvmgen {

// Registers tvmgen.<api>.set_cache_dir(dir), cache_dir(), cache_stats() (JSON) for ``Cache`` (a singleton
// with Global(), SetDir, Dir and StatsJson: the backend's disk cache), and tvmgen.<api>.profiling(on) ->
// the previous setting and kernel_times() -> {kernel: [launches, ns]} for ``Workspace`` (Global(),
// SetProfiling, TakeKernelTimes: the device's timestamps of every launch since the last call).
template <typename Cache, typename Workspace>
void RegisterCacheAndProfiling(const std::string& api) {
  namespace ffi = tvm::ffi;
  auto set = [&api](const char* what, ffi::Function f) {
    ffi::Function::SetGlobal("tvmgen." + api + "." + what, std::move(f), true);
  };
  set("set_cache_dir", ffi::Function::FromTyped([](ffi::String dir) { Cache::Global().SetDir(std::string(dir)); }));
  set("cache_dir", ffi::Function::FromTyped([]() { return ffi::String(Cache::Global().Dir()); }));
  set("cache_stats", ffi::Function::FromTyped([]() { return ffi::String(Cache::Global().StatsJson()); }));
  set("profiling", ffi::Function::FromTyped([](bool on) { return Workspace::Global().SetProfiling(on); }));
  set("kernel_times", ffi::Function::FromTyped([]() {
        ffi::Map<ffi::String, ffi::Array<int64_t>> out;
        for (const auto& [name, t] : Workspace::Global().TakeKernelTimes()) {
          const auto& [launches, ns] = t;  // a {launches, ns} struct or pair
          out.Set(ffi::String(name), ffi::Array<int64_t>{int64_t(launches), int64_t(ns)});
        }
        return out;
      }));
}

// Registers a GPU backend under its TVM name `api` (opencl, vulkan): device_api.<api> (its DeviceAPI*,
// what TVM's runtime asks for), ffi.Module.load_from_bytes.<api> (the loader of the kernel module a model
// library embeds), tvmgen.<api>.info (JSON: the library, platform and device, or why it is unavailable),
// and RegisterCacheAndProfiling's functions. With `log_at_exit`, the cache's counters are printed at exit
// ("tvmgen-<api>: cache {...}" on stderr).
template <typename Cache, typename Workspace>
void RegisterBackend(const std::string& api, void* (*device_api)(), tvm::ffi::Module (*load_from_bytes)(const tvm::ffi::Bytes&),
                     std::string (*info)(), bool log_at_exit) {
  namespace ffi = tvm::ffi;
  ffi::Function::SetGlobal("device_api." + api, ffi::Function::FromTyped([device_api]() { return device_api(); }), true);
  ffi::Function::SetGlobal("ffi.Module.load_from_bytes." + api, ffi::Function::FromTyped(load_from_bytes), true);
  ffi::Function::SetGlobal("tvmgen." + api + ".info", ffi::Function::FromTyped([info]() { return ffi::String(info()); }),
                           true);
  RegisterCacheAndProfiling<Cache, Workspace>(api);
  if (log_at_exit) {
    static const std::string* name = new std::string(api);  // one per backend (template instance); never freed
    std::atexit([] { std::fprintf(stderr, "tvmgen-%s: cache %s\n", name->c_str(), Cache::Global().StatsJson().c_str()); });
  }
}

// The C API's halves (the exported functions themselves are each backend's, under its own name):
// the cache directory set ("" turns the cache off; returns 0), and a JSON string copied into an app's
// buffer (size n, NUL-terminated, truncated if needed; returns the full length).
template <typename Cache>
int SetCacheDirFromC(const char* dir) {
  Cache::Global().SetDir(dir ? dir : "");
  return 0;
}

inline size_t CopyToCBuffer(const std::string& s, char* buf, size_t n) {
  if (buf && n) {
    size_t k = std::min(n - 1, s.size());
    std::memcpy(buf, s.data(), k);
    buf[k] = '\0';
  }
  return s.size();
}

}  // namespace tvmgen
