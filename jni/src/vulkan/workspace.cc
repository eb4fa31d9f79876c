// The Vulkan workspace's set-up (instance, device, queue, pools), its memory, and its counters (workspace.h).
#include "workspace.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "../common/json.h"

namespace tvmgen {
namespace vulkan {

std::string Workspace::CountsJson() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  std::ostringstream o;
  o << "{\"dispatches\": " << counts.dispatches << ", \"barriers\": " << counts.barriers << ", \"submits\": "
    << counts.submits << ", \"descriptor_sets_written\": " << counts.sets_written
    << ", \"descriptor_sets_reused\": " << counts.sets_reused << ", \"recorded_runs\": {\"captured\": "
    << counts.captured << ", \"failed\": " << counts.capture_failed << ", \"replays\": " << counts.replays
    << ", \"invalidated\": " << counts.invalidated << ", \"last_failure\": \"" << last_capture_failure << "\"}";
  if (host_timing) {
    o << ", \"host_us\": {\"recording\": " << host.launch_ns / 1000 << ", \"submitting\": " << host.submit_ns / 1000
      << ", \"waiting\": " << host.wait_ns / 1000 << ", \"resetting\": " << host.reset_ns / 1000
      << ", \"waits\": " << host.flushes << "}";
  }
  o << "}";
  return o.str();
}

Buffer* Workspace::Allocate(size_t nbytes, bool staging) {
  Check();
  std::lock_guard<std::recursive_mutex> lock(mu);
  auto* b = new Buffer();
  b->size = nbytes;
  b->id = next_buffer_id++;
  VkBufferCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  // whole 32-bit words: kernels reach 8- and 16-bit elements through the word that holds them
  ci.size = nbytes ? (nbytes + 3) / 4 * 4 : 4;
  ci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  TVMGEN_VK_CHECK(api.CreateBuffer(device, &ci, nullptr, &b->buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  api.GetBufferMemoryRequirements(device, b->buffer, &req);
  // Device-local memory; host-visible and coherent too where there is such (phones, lavapipe): then it is
  // mapped once and copies are memcpy. Otherwise copies go through a staging buffer.
  const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const std::vector<VkMemoryPropertyFlags> want =
      staging ? std::vector<VkMemoryPropertyFlags>{host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, host}
              : std::vector<VkMemoryPropertyFlags>{VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host,
                                                   VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, host};
  VkResult last = VK_ERROR_OUT_OF_DEVICE_MEMORY;
  for (VkMemoryPropertyFlags flags : want) {
    int type = MemoryType(req.memoryTypeBits, flags);
    if (type < 0) continue;
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = static_cast<uint32_t>(type);
    last = api.AllocateMemory(device, &ai, nullptr, &b->memory);
    if (last != VK_SUCCESS) continue;
    TVMGEN_VK_CHECK(api.BindBufferMemory(device, b->buffer, b->memory, 0), "vkBindBufferMemory");
    VkMemoryPropertyFlags have = memory.memoryTypes[type].propertyFlags;
    if ((have & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (have & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
      TVMGEN_VK_CHECK(api.MapMemory(device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped), "vkMapMemory");
      // a GPU's own memory mapped through its BAR is write-combined: reading it is slow (0.13 ms for
      // 4 KB from a discrete GPU), so copies to the host go through a cached staging buffer there
      b->host_cached = (have & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) != 0 ||
                       props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                       props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
    }
    buffers[b] = b;
    return b;
  }
  api.DestroyBuffer(device, b->buffer, nullptr);
  delete b;
  TVM_FFI_THROW(RuntimeError) << "Vulkan: allocating " << nbytes << " bytes on " << props.deviceName
                              << " failed: " << ResultName(last);
  return nullptr;
}

void Workspace::Free(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  auto it = buffers.find(ptr);
  if (it == buffers.end()) return;
  Buffer* b = it->second;
  buffers.erase(it);
  if (recording || !in_flight.empty()) {
    doomed.push_back(b);
  } else {
    Destroy(b);
  }
}

void Workspace::Destroy(Buffer* b) {
  if (b->capture_uses > 0) InvalidateCaptures(b);
  held.erase(b);
  if (!set_cache.empty()) {  // its cached descriptor sets go with it
    std::vector<VkDescriptorSet> gone;
    for (auto it = set_cache.begin(); it != set_cache.end();) {
      if (std::find(it->first.begin() + 1, it->first.end(), b->id) != it->first.end()) {
        gone.push_back(it->second);
        it = set_cache.erase(it);
      } else {
        ++it;
      }
    }
    if (!gone.empty()) api.FreeDescriptorSets(device, set_pool, static_cast<uint32_t>(gone.size()), gone.data());
  }
  for (std::vector<const Buffer*>* v : {&written_since_barrier, &read_since_barrier}) {
    v->erase(std::remove(v->begin(), v->end(), b), v->end());
  }
  if (b->mapped) api.UnmapMemory(device, b->memory);
  api.DestroyBuffer(device, b->buffer, nullptr);
  api.FreeMemory(device, b->memory, nullptr);
  delete b;
}

void* Workspace::AllocWorkspace(size_t nbytes) {
  {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto it = free_workspaces.lower_bound(nbytes);
    if (it != free_workspaces.end() && it->first <= nbytes * 2 + 4096) {
      void* p = it->second;
      free_workspaces.erase(it);
      return p;
    }
  }
  return Allocate(nbytes);
}

void Workspace::FreeWorkspace(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  auto it = buffers.find(ptr);
  if (it == buffers.end()) TVM_FFI_THROW(RuntimeError) << "Vulkan: FreeWorkspace of a buffer this runtime did not allocate";
  free_workspaces.emplace(it->second->size, ptr);
}

int Workspace::MemoryType(uint32_t bits, VkMemoryPropertyFlags flags) const {
  for (uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
    if ((bits & (1u << i)) && (memory.memoryTypes[i].propertyFlags & flags) == flags) return static_cast<int>(i);
  }
  return -1;
}

void Workspace::Init() {
  std::string err = OpenLibrary(&api);
  if (!err.empty()) TVM_FFI_THROW(RuntimeError) << err;
  api.CreateInstance = reinterpret_cast<PFN_vkCreateInstance>(api.GetInstanceProcAddr(nullptr, "vkCreateInstance"));
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "tvmgen";
  app.apiVersion = VK_API_VERSION_1_0;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  TVMGEN_VK_CHECK(api.CreateInstance(&ici, nullptr, &instance),
                  std::string("vkCreateInstance through ") + api.path + " (no Vulkan driver? " + kNoDriverFix + ")");
#define TVMGEN_VK_LOAD(name)                                                                          \
api.name = reinterpret_cast<PFN_vk##name>(api.GetInstanceProcAddr(instance, "vk" #name));          \
if (api.name == nullptr) TVM_FFI_THROW(RuntimeError) << "Vulkan: " << api.path << " has no vk" #name;
  TVMGEN_VK_FUNCTIONS(TVMGEN_VK_LOAD)
#undef TVMGEN_VK_LOAD
  uint32_t n = 0;
  TVMGEN_VK_CHECK(api.EnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
  if (n == 0) {
    TVM_FFI_THROW(RuntimeError) << "no Vulkan device (the loader " << api.path << " found no driver): " << kNoDriverFix;
  }
  std::vector<VkPhysicalDevice> devs(n);
  TVMGEN_VK_CHECK(api.EnumeratePhysicalDevices(instance, &n, devs.data()), "vkEnumeratePhysicalDevices");
  int pick = -1;
  if (const char* v = std::getenv("TVMGEN_VULKAN_DEVICE")) {
    pick = std::atoi(v);
    if (pick < 0 || pick >= static_cast<int>(n)) {
      TVM_FFI_THROW(RuntimeError) << "TVMGEN_VULKAN_DEVICE=" << v << ": there are " << n << " Vulkan devices";
    }
  } else {
    for (VkPhysicalDeviceType t : {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU}) {
      for (uint32_t i = 0; i < n && pick < 0; ++i) {
        VkPhysicalDeviceProperties p;
        api.GetPhysicalDeviceProperties(devs[i], &p);
        if (p.deviceType == t) pick = static_cast<int>(i);
      }
    }
    if (pick < 0) pick = 0;
  }
  physical = devs[pick];
  api.GetPhysicalDeviceProperties(physical, &props);
  api.GetPhysicalDeviceMemoryProperties(physical, &memory);
  uint32_t nq = 0;
  api.GetPhysicalDeviceQueueFamilyProperties(physical, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qs(nq);
  api.GetPhysicalDeviceQueueFamilyProperties(physical, &nq, qs.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; ++i) {
    if (qs[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family = i;
      found = true;
    }
  }
  if (!found) TVM_FFI_THROW(RuntimeError) << "Vulkan device " << props.deviceName << " has no compute queue";
  timestamp_bits = qs[queue_family].timestampValidBits;
  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  TVMGEN_VK_CHECK(api.CreateDevice(physical, &dci, nullptr, &device), "vkCreateDevice");
  api.GetDeviceQueue(device, queue_family, 0, &queue);
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family;
  TVMGEN_VK_CHECK(api.CreateCommandPool(device, &pci, nullptr, &pool), "vkCreateCommandPool");
  if (const char* v = std::getenv("TVMGEN_VULKAN_DISPATCHES_PER_SUBMIT")) {
    dispatches_per_submit = std::atoi(v);  // 0: one submit per run (when the host needs results)
  }
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kMaxDescriptors};
  VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = kMaxSets;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &size;
  TVMGEN_VK_CHECK(api.CreateDescriptorPool(device, &dpi, nullptr, &descriptors), "vkCreateDescriptorPool");
  auto env_is = [](const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::strcmp(v, value) == 0;
  };
  every_dispatch_barrier = env_is("TVMGEN_VULKAN_BARRIERS", "all");
  wide_barriers = every_dispatch_barrier || env_is("TVMGEN_VULKAN_BARRIERS", "wide");
  submit_when_idle = !env_is("TVMGEN_VULKAN_SUBMIT_WHEN_IDLE", "0");
  set_cache_on = !env_is("TVMGEN_VULKAN_SET_CACHE", "0");
  replay_on = !env_is("TVMGEN_VULKAN_REPLAY", "0");
  VkDescriptorPoolSize cache_size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 4 * kMaxDescriptors};
  VkDescriptorPoolCreateInfo cpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  cpi.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
  cpi.maxSets = 4 * kMaxSets;
  cpi.poolSizeCount = 1;
  cpi.pPoolSizes = &cache_size;
  if (api.CreateDescriptorPool(device, &cpi, nullptr, &set_pool) != VK_SUCCESS) set_pool = VK_NULL_HANDLE;
  host_timing = std::getenv("TVMGEN_VULKAN_LOG") != nullptr;
  if (host_timing) {
    std::fprintf(stderr, "tvmgen-vulkan: device %s (Vulkan %u.%u.%u, driver %u), loader %s\n", props.deviceName,
                 VK_VERSION_MAJOR(props.apiVersion), VK_VERSION_MINOR(props.apiVersion),
                 VK_VERSION_PATCH(props.apiVersion), props.driverVersion, api.path.c_str());
  }
}

std::string InfoJson() {
  Workspace& w = Workspace::Global();
  std::ostringstream o;
  if (!w.TryInit()) {
    o << "{\"available\": false, \"error\": \"" << JsonEscape(w.error()) << "\"}";
    return o.str();
  }
  const auto& p = w.props;
  o << "{\"available\": true, \"library\": \"" << JsonEscape(w.api.path) << "\", \"device\": \""
    << JsonEscape(p.deviceName) << "\", \"type\": " << p.deviceType << ", \"api\": \"" << VK_VERSION_MAJOR(p.apiVersion)
    << "." << VK_VERSION_MINOR(p.apiVersion) << "." << VK_VERSION_PATCH(p.apiVersion) << "\", \"driver\": "
    << p.driverVersion << ", \"max_workgroup_invocations\": " << p.limits.maxComputeWorkGroupInvocations
    << ", \"shared_memory\": " << p.limits.maxComputeSharedMemorySize
    << ", \"max_push_constants\": " << p.limits.maxPushConstantsSize << "}";
  return o.str();
}

}  // namespace vulkan
}  // namespace tvmgen
