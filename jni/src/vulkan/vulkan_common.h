// The Vulkan backend's shared declarations: the entry points opened with dlopen (the API table), the
// error check, the log switch, and the functions each file of the backend gives the others.
// The backend's files (libtvmgen_vulkan.so):
//   vulkan_common.h, vulkan_api.cc              libvulkan opened with dlopen, the entry points, VkResult names
//   workspace.h, workspace.cc                   the instance, device and queue; memory; the counters
//   workspace_commands.cc                       command buffers, submission, barriers, descriptor sets, profiling
//   recorded_runs.cc                            recorded runs (Model::Run's replays)
//   vulkan_device_api.cc                        the DeviceAPI (buffers, copies, attributes)
//   pipeline_cache.h                            the pipeline cache on disk
//   vulkan_module.cc                            the kernel module: its loader, pipelines and launches
//   vulkan_registration.cc                      the globals this library registers, and the C API
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <tvm/ffi/any.h>
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <string>

#include "../opencl/device_api.h"

namespace tvmgen {
namespace vulkan {

namespace ffi = tvm::ffi;
using tvm::runtime::DeviceAPI;
using tvm::runtime::DeviceAttrKind;

const char* ResultName(VkResult r);

#define TVMGEN_VK_CHECK(expr, what)                                                                  \
  do {                                                                                              \
    VkResult _r = (expr);                                                                           \
    if (_r != VK_SUCCESS) {                                                                         \
      TVM_FFI_THROW(RuntimeError) << "Vulkan: " << what << " failed: " << ResultName(_r) << " (" << _r \
                                  << ")";                                                           \
    }                                                                                               \
  } while (0)

// The entry points, opened with dlopen (vulkan_api.cc) and loaded through the instance (Workspace::Init).
struct Api {
  void* lib = nullptr;
  std::string path;
  PFN_vkGetInstanceProcAddr GetInstanceProcAddr = nullptr;
#define TVMGEN_VK_FN(name) PFN_vk##name name = nullptr;
#define TVMGEN_VK_FUNCTIONS(X)                                                                                     \
  X(CreateInstance) X(EnumeratePhysicalDevices) X(GetPhysicalDeviceProperties) X(GetPhysicalDeviceQueueFamilyProperties) \
  X(GetPhysicalDeviceMemoryProperties) X(CreateDevice) X(GetDeviceQueue) X(CreateBuffer) X(DestroyBuffer)          \
  X(GetBufferMemoryRequirements) X(AllocateMemory) X(FreeMemory) X(BindBufferMemory) X(MapMemory) X(UnmapMemory)   \
  X(CreateCommandPool) X(AllocateCommandBuffers) X(BeginCommandBuffer) X(EndCommandBuffer) X(ResetCommandBuffer)   \
  X(QueueSubmit) X(QueueWaitIdle) X(CreateFence) X(WaitForFences) X(ResetFences) X(CmdCopyBuffer)                  \
  X(CmdPipelineBarrier) X(CmdBindPipeline) X(CmdBindDescriptorSets) X(CmdPushConstants) X(CmdDispatch)             \
  X(CreateShaderModule) X(DestroyShaderModule) X(CreateDescriptorSetLayout) X(CreatePipelineLayout)                \
  X(CreateComputePipelines) X(CreatePipelineCache) X(CreateDescriptorPool) X(ResetDescriptorPool)                  \
  X(AllocateDescriptorSets) X(UpdateDescriptorSets) X(GetPipelineCacheData) X(DestroyPipelineCache)                 \
  X(CreateQueryPool) X(CmdResetQueryPool) X(CmdWriteTimestamp) X(GetQueryPoolResults) X(GetFenceStatus)         \
  X(FreeDescriptorSets)
  TVMGEN_VK_FUNCTIONS(TVMGEN_VK_FN)
#undef TVMGEN_VK_FN
};

// Opens libvulkan (TVMGEN_VULKAN_LIBRARY, else libvulkan.so.1 / libvulkan.so) into `api`; "" or why not.
std::string OpenLibrary(Api* api);

// What to do when the loader finds no driver (the error's fix).
constexpr const char* kNoDriverFix =
    "install the GPU's Vulkan driver (a CPU one: apt-get install mesa-vulkan-drivers), check VK_DRIVER_FILES / "
    "VK_ICD_FILENAMES if set, or compile the model with --device cpu";

// TVMGEN_VULKAN_LOG set (and not 0): the cache's and the commands' counters at exit, overridden kernels.
bool LogOn();

// The DeviceAPI (vulkan_device_api.cc), the module loader (vulkan_module.cc), and the JSON of
// tvmgen.vulkan.info (workspace.cc).
DeviceAPI* GlobalDeviceAPI();
ffi::Module LoadFromBytes(const ffi::Bytes& bytes);
std::string InfoJson();

}  // namespace vulkan
}  // namespace tvmgen
