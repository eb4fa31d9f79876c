// The tvmgen.<api>.* global functions that both GPU backends (libtvmgen_opencl, libtvmgen_vulkan)
// register, written once: their on-disk cache's directory and statistics, and their profiling mode.
#pragma once

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdint>
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

}  // namespace tvmgen
