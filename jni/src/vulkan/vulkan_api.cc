// libvulkan, opened with dlopen on first use (nothing links it), and the names of its results.
#include "vulkan_common.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace tvmgen {
namespace vulkan {

const char* ResultName(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult";
  }
}

std::string OpenLibrary(Api* api) {
  std::vector<std::string> paths;
  if (const char* p = std::getenv("TVMGEN_VULKAN_LIBRARY")) {
    paths.push_back(p);
  } else {
    paths = {"libvulkan.so.1", "libvulkan.so"};
  }
  std::string errors;
  for (const std::string& p : paths) {
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      errors += "; " + p + ": " + (e ? e : "not found");
      continue;
    }
    auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(h, "vkGetInstanceProcAddr"));
    if (gipa == nullptr) {
      errors += "; " + p + ": no vkGetInstanceProcAddr";
      dlclose(h);
      continue;
    }
    api->lib = h;
    api->path = p;
    api->GetInstanceProcAddr = gipa;
    return "";
  }
  return "no Vulkan loader could be opened" + errors +
         " (install the Vulkan loader: Debian libvulkan1; a phone has /system/lib64/libvulkan.so; or set "
         "TVMGEN_VULKAN_LIBRARY)";
}

bool LogOn() {
  static const bool on = [] {
    const char* v = std::getenv("TVMGEN_VULKAN_LOG");
    return v != nullptr && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

}  // namespace vulkan
}  // namespace tvmgen
