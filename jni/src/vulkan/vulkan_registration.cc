// tvmgen's own Vulkan backend for the TVM 0.27 runtime (libtvmgen_vulkan.so).
//
// The PyPI TVM runtime has no Vulkan, and tvmgen's Vulkan kernels are its own (GLSL compute shaders
// compiled to SPIR-V by `tvmgen compile --device vulkan`, generator/tvmgen/compiler/vulkan/__init__.py). Loading
// this library registers, through tvm-ffi globals:
//   device_api.vulkan                   a kDLVulkan DeviceAPI (buffers, copies, attributes)
//   ffi.Module.load_from_bytes.vulkan   the loader of the SPIR-V kernels embedded in a model library
//   tvmgen.vulkan.info                  JSON: the loader, instance and device in use (or the error)
//   tvmgen.vulkan.set_cache_dir / cache_dir / cache_stats   the pipeline cache on disk
//   tvmgen.vulkan.profiling / kernel_times                  per-kernel times from timestamp queries
// libvulkan is opened with dlopen on first use (nothing links it): libvulkan.so.1 / libvulkan.so,
// or TVMGEN_VULKAN_LIBRARY. The device: the first discrete GPU, else integrated, else any (lavapipe, a
// CPU device); TVMGEN_VULKAN_DEVICE=N picks the N-th physical device.
//
// This file: the registration of every global, and the C API.
#include <cstdio>
#include <cstdlib>

#include "../common/backend_globals.h"
#include "pipeline_cache.h"
#include "workspace.h"

namespace tvmgen {
namespace vulkan {

struct Registration {
  Registration() {
    auto set = [](const char* name, ffi::Function f) { ffi::Function::SetGlobal(name, std::move(f), true); };
    if (LogOn()) {  // registered before the cache's line, so that it is printed after it
      std::atexit([] { std::fprintf(stderr, "tvmgen-vulkan: commands %s\n", Workspace::Global().CountsJson().c_str()); });
    }
    RegisterBackend<PipelineCacheDir, Workspace>(
        "vulkan", [] { return static_cast<void*>(GlobalDeviceAPI()); }, LoadFromBytes, InfoJson, LogOn());
    // recorded runs (Model::Run): begin -> run the VM -> end gives an id (0: not replayable), replay(id)
    set("tvmgen.vulkan.capture_begin", ffi::Function::FromTyped([]() { return Workspace::Global().CaptureBegin(); }));
    set("tvmgen.vulkan.capture_end", ffi::Function::FromTyped([]() { return Workspace::Global().CaptureEnd(); }));
    set("tvmgen.vulkan.replay", ffi::Function::FromTyped([](int64_t id, int64_t owner) {
          return Workspace::Global().Replay(id, owner);
        }));
    set("tvmgen.vulkan.hold", ffi::Function::FromTyped([](int64_t owner, ffi::Array<int64_t> ptrs) {
          Workspace::Global().Hold(owner, ptrs);
        }));
    set("tvmgen.vulkan.release", ffi::Function::FromTyped([](int64_t id) { Workspace::Global().ReleaseCapture(id); }));
  }
};
Registration registration;

}  // namespace vulkan
}  // namespace tvmgen

// ------------------------------------------------------------------ C API (for apps and JNI)
extern "C" {
/*! \brief Set the Vulkan pipeline cache directory ("" turns the cache off). Returns 0. */
__attribute__((visibility("default"))) int TVMGenVulkanSetCacheDir(const char* dir) {
  return tvmgen::SetCacheDirFromC<tvmgen::vulkan::PipelineCacheDir>(dir);
}
}
