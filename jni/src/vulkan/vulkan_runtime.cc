// tvmgen's own Vulkan backend for the TVM 0.27 runtime (libtvmgen_vulkan.so).
//
// The PyPI TVM runtime has no Vulkan, and tvmgen's Vulkan kernels are its own (GLSL compute shaders
// compiled to SPIR-V by `tvmgen compile --device vulkan`, generator/tvmgen/compiler/vulkan.py). Loading
// this library registers, through tvm-ffi globals:
//   device_api.vulkan                   a kDLVulkan DeviceAPI (buffers, copies, attributes)
//   ffi.Module.load_from_bytes.vulkan   the loader of the SPIR-V kernels embedded in a model library
//   tvmgen.vulkan.info                  JSON: the loader, instance and device in use (or the error)
//   tvmgen.vulkan.set_cache_dir / cache_dir / cache_stats   the pipeline cache on disk
//   tvmgen.vulkan.profiling / kernel_times                  per-kernel times from timestamp queries
// libvulkan is opened with dlopen on first use (nothing links it): libvulkan.so.1 / libvulkan.so,
// or TVMGEN_VULKAN_LIBRARY. The device: the first discrete GPU, else integrated, else any (lavapipe, a
// CPU device, on the hosts here); TVMGEN_VULKAN_DEVICE=N picks the N-th physical device.
//
// Execution: kernel launches and device-to-device copies are recorded into command buffers, a
// compute-to-compute memory barrier before a dispatch only where it touches a buffer that a dispatch
// since the last barrier wrote (or writes one that such a dispatch read); copies count as such commands
// (their barriers cover the transfer stage too);
// a command buffer is submitted without waiting every 32 dispatches, or after 2 when the device has
// nothing left to run, and waited for when the host needs the results (a copy to the host, StreamSync).
// Descriptor sets are cached per kernel and buffers (a steady run writes none). Each kernel
// is one compute pipeline: its buffers are the storage buffers of descriptor set 0 (bindings in
// parameter order), its scalars 4-byte push constants.
//
// Pipelines: when a model library is loaded, its kernels' pipelines are created by background threads
// (min(8, cores)), so the driver's compiles overlap the model's loading; a launch waits for its own
// kernel's pipeline only. They are created through one VkPipelineCache per kernel module, which persists
// across processes: <dir>/<sha256(key)[:40]>.vkpc, key = sha256(the module's SPIR-V payload) + device
// name, vendor and device ids, driver version, pipelineCacheUUID + this format's version; the file holds
// "TVMGENVC", u32 format, u64 key length, key, u64 data length, vkGetPipelineCacheData's bytes, and the
// data's sha256. An entry that does not verify is deleted and the pipelines built from SPIR-V; a new
// entry is written (temporary name, then rename) once every pipeline of the module exists. Directory:
// tvmgen.vulkan.set_cache_dir / TVMGenVulkanSetCacheDir (apps), else $TVMGEN_VULKAN_CACHE_DIR ("" turns
// it off), else $XDG_CACHE_HOME/tvmgen/vulkan or ~/.cache/tvmgen/vulkan. TVMGEN_VULKAN_LOG=1 prints the
// cache's counters at exit ("tvmgen-vulkan: cache {...}").
//
// Profiling (tvmgen.vulkan.profiling(true)): each dispatch is bracketed by vkCmdWriteTimestamp (after
// the work before it, at the end of its own), read back when the command buffer has run, and summed per
// kernel (tvmgen.vulkan.kernel_times(): {kernel: [launches, ns]}), as libtvmgen_opencl does with events.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common/backend_globals.h"
#include "../common/blob_reader.h"
#include "../common/disk_cache.h"
#include "../opencl/device_api.h"
#include "../opencl/sha256.h"

namespace tvmgen {
namespace vulkan {

namespace ffi = tvm::ffi;
using tvm::runtime::DeviceAPI;
using tvm::runtime::DeviceAttrKind;

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

#define TVMGEN_VK_CHECK(expr, what)                                                                  \
  do {                                                                                              \
    VkResult _r = (expr);                                                                           \
    if (_r != VK_SUCCESS) {                                                                         \
      TVM_FFI_THROW(RuntimeError) << "Vulkan: " << what << " failed: " << ResultName(_r) << " (" << _r \
                                  << ")";                                                           \
    }                                                                                               \
  } while (0)

// ------------------------------------------------------------------ the entry points, opened with dlopen
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

// What to do when the loader finds no driver (the error's fix).
constexpr const char* kNoDriverFix =
    "install the GPU's Vulkan driver (a CPU one: apt-get install mesa-vulkan-drivers), check VK_DRIVER_FILES / "
    "VK_ICD_FILENAMES if set, or compile the model with --device cpu";

// ------------------------------------------------------------------ the workspace: instance, device, queue
struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  size_t size = 0;
  void* mapped = nullptr;  // host-visible, coherent memory: persistently mapped
  bool host_cached = false;  // mapped memory the host reads fast (not write-combined, as a GPU's BAR is)
  uint64_t id = 0;  // unique in the process (the descriptor-set cache's key; addresses are reused)
  // recorded runs (Workspace::Capture) whose commands use / write this buffer
  int capture_uses = 0, capture_writes = 0;
};

// A cached descriptor set's key: the kernel's set layout, then its buffers' ids in binding order.
struct SetKeyHash {
  size_t operator()(const std::vector<uint64_t>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : k) h = (h ^ v) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

class Workspace {
 public:
  static Workspace& Global() {
    static Workspace* w = new Workspace();  // never destroyed: TVM may free buffers at exit
    return *w;
  }

  bool TryInit() {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!initialised_) {
      initialised_ = true;
      try {
        Init();
        ok_ = true;
      } catch (const ffi::Error& e) {
        error_ = e.message();
      }
    }
    return ok_;
  }

  void Check() {
    if (!TryInit()) TVM_FFI_THROW(RuntimeError) << "Vulkan is not available: " << error_;
  }
  const std::string& error() const { return error_; }

  Api api;
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props{};
  VkPhysicalDeviceMemoryProperties memory{};
  VkDevice device = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  VkQueue queue = VK_NULL_HANDLE;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;  // the one being recorded (allocated by Begin)
  VkDescriptorPool descriptors = VK_NULL_HANDLE;
  std::recursive_mutex mu;
  bool recording = false;
  int pending_sets = 0;
  static constexpr int kMaxSets = 1024;
  static constexpr int kMaxDescriptors = 16384;
  std::unordered_map<const void*, Buffer*> buffers;
  uint64_t next_buffer_id = 1;
  // Dependencies between dispatches: the buffers that commands recorded since the last barrier write
  // and read (all dispatches ever recorded are ordered by the barriers before them, across submits).
  // TVMGEN_VULKAN_BARRIERS=all: a barrier before every dispatch (as before).
  // a handful of buffers between two barriers: vectors searched linearly (no allocation per dispatch)
  std::vector<const Buffer*> written_since_barrier, read_since_barrier;
  static bool Has(const std::vector<const Buffer*>& v, const Buffer* b) {
    return std::find(v.begin(), v.end(), b) != v.end();
  }
  bool every_dispatch_barrier = false;
  bool copied_since_barrier = true;  // a copy was recorded since the last barrier (or none yet)
  bool wide_barriers = false;  // TVMGEN_VULKAN_BARRIERS=wide: compute and transfer stages in every one
  bool submit_when_idle = true;  // TVMGEN_VULKAN_SUBMIT_WHEN_IDLE=0: only every dispatches_per_submit
  // Descriptor sets kept for the next launch of the same kernel on the same buffers (a model's steady
  // runs launch the same kernels on the same buffers): allocated from `set_pool`, freed when one of their
  // buffers is destroyed. When it is full, sets come from `descriptors`, reset at every Flush.
  // TVMGEN_VULKAN_SET_CACHE=0: no cache.
  VkDescriptorPool set_pool = VK_NULL_HANDLE;
  bool set_cache_on = true;
  std::unordered_map<std::vector<uint64_t>, VkDescriptorSet, SetKeyHash> set_cache;
  // what was recorded (TVMGEN_VULKAN_LOG=1 prints it at exit: "tvmgen-vulkan: commands {...}")
  struct Counts {
    int64_t dispatches = 0, barriers = 0, submits = 0, sets_written = 0, sets_reused = 0;
    int64_t captured = 0, capture_failed = 0, replays = 0, invalidated = 0;
  } counts;
  // where the host's time goes (with TVMGEN_VULKAN_LOG, in the same line): recording dispatches (Launch),
  // vkQueueSubmit, waiting for the device when the host needs results (Flush), and the resets after it
  bool host_timing = false;
  struct HostTimes {
    int64_t launch_ns = 0, submit_ns = 0, wait_ns = 0, reset_ns = 0, flushes = 0;
  } host;
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::string CountsJson() {
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
  // profiling: timestamps around each dispatch of the command buffer being recorded
  bool profiling = false;
  VkQueryPool queries = VK_NULL_HANDLE;
  static constexpr uint32_t kMaxQueries = 4096;  // 2 per dispatch
  uint32_t used_queries = 0;
  std::vector<std::string> query_kernels;  // the kernel of each pair of queries recorded
  std::map<std::string, std::pair<int64_t, int64_t>> kernel_times;  // kernel -> (launches, ns)

  bool SetProfiling(bool on) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    Check();
    bool was = profiling;
    if (on && !was) {
      if (props.limits.timestampPeriod <= 0 || timestamp_bits == 0) {
        TVM_FFI_THROW(RuntimeError) << "Vulkan device " << props.deviceName
                                    << " has no timestamps on its compute queue: cannot profile kernels";
      }
      if (queries == VK_NULL_HANDLE) {
        VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
        qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qi.queryCount = kMaxQueries;
        TVMGEN_VK_CHECK(api.CreateQueryPool(device, &qi, nullptr, &queries), "vkCreateQueryPool");
      }
      Flush();  // the dispatches recorded so far are not timed
    }
    if (!on && was) Flush();
    profiling = on;
    return was;
  }

  std::map<std::string, std::pair<int64_t, int64_t>> TakeKernelTimes() {
    std::lock_guard<std::recursive_mutex> lock(mu);
    Flush();
    auto out = std::move(kernel_times);
    kernel_times.clear();
    return out;
  }

  // Before a dispatch of `kernel` is recorded (BeginTimed), right before it (WriteStart: its start
  // timestamp) and after it (EndTimed: its end one).
  void BeginTimed(const std::string& kernel) {
    if (!profiling) return;
    if (used_queries + 2 > kMaxQueries) Flush();
    Begin();
    if (used_queries == 0) api.CmdResetQueryPool(cmd, queries, 0, kMaxQueries);
    query_kernels.push_back(kernel);
  }
  void WriteStart() {
    if (profiling) api.CmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, queries, used_queries);
  }
  void EndTimed() {
    if (!profiling) return;
    api.CmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, used_queries + 1);
    used_queries += 2;
  }
  uint32_t timestamp_bits = 0;

  // ---- the command buffers
  // Commands are recorded into `cmd`; every dispatches_per_submit dispatches it is submitted without
  // waiting (the device starts on a run's first kernels while the host records the rest) and recording
  // goes on in another command buffer. Flush submits what is left and waits for everything. The
  // barriers also order the dispatches of later submissions (same queue).
  struct Submitted {
    VkCommandBuffer cmd;
    VkFence fence;
    bool keep = false;  // a recorded run's command buffer (Capture): not reset after it ran
  };
  std::vector<Submitted> in_flight;
  std::vector<VkCommandBuffer> spare_cmds;
  std::vector<VkFence> spare_fences;
  int dispatches = 0;  // recorded into `cmd` since it began
  // 32: on an H100, 8 -> 32 took EfficientNet-B0 from 2.02 to 1.87 ms, MobileNetV3-Small 0.75 -> 0.66
  // (each submission costs NVIDIA's device time); a run's first dispatches go at once (Dispatched)
  int dispatches_per_submit = 32;

  void Begin() {
    if (recording) return;
    BeginRecording(VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
  }
  // `cmd` (a spare command buffer, or a new one) begun with `flags`.
  void BeginRecording(VkCommandBufferUsageFlags flags) {
    if (cmd == VK_NULL_HANDLE) {
      if (!spare_cmds.empty()) {
        cmd = spare_cmds.back();
        spare_cmds.pop_back();
      } else {
        VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        cai.commandPool = pool;
        cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cai.commandBufferCount = 1;
        TVMGEN_VK_CHECK(api.AllocateCommandBuffers(device, &cai, &cmd), "vkAllocateCommandBuffers");
      }
    }
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = flags;
    TVMGEN_VK_CHECK(api.BeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
    recording = true;
    dispatches = 0;
  }

  // What `cmd` holds, submitted; not waited for.
  void Submit() {
    if (!recording) return;
    if (capturing != nullptr) FailCapture("the run needed the device's results before its end (a copy to the host or a sync)");
    recording = false;
    TVMGEN_VK_CHECK(api.EndCommandBuffer(cmd), "vkEndCommandBuffer");
    SubmitBuffer(cmd, /*keep=*/false);
    cmd = VK_NULL_HANDLE;
  }
  // The ended command buffer `c`, submitted with a fence of its own; `keep`: a recorded run's, not reset after.
  void SubmitBuffer(VkCommandBuffer c, bool keep) {
    VkFence f = VK_NULL_HANDLE;
    if (!spare_fences.empty()) {
      f = spare_fences.back();
      spare_fences.pop_back();
    } else {
      VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
      TVMGEN_VK_CHECK(api.CreateFence(device, &fci, nullptr, &f), "vkCreateFence");
    }
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &c;
    int64_t t0 = host_timing ? NowNs() : 0;
    VkResult r = api.QueueSubmit(queue, 1, &si, f);
    if (host_timing) host.submit_ns += NowNs() - t0;
    if (r != VK_SUCCESS) spare_fences.push_back(f);
    TVMGEN_VK_CHECK(r, "vkQueueSubmit");
    in_flight.push_back({c, f, keep});
    counts.submits++;
  }

  // After a dispatch was recorded: submit every dispatches_per_submit of them.
  // Also after 2 when the device has finished everything submitted (nothing in flight, or the last
  // submission's fence signalled): then waiting for more dispatches would leave it idle (a run's first
  // dispatches, and models whose kernels are shorter than the host's recording of 32 of them). Not after
  // 1: on NVIDIA each submission costs the device several microseconds, and a model of two kernels
  // (VAD) was slower submitting them one by one.
  //
  // The idle rule's count doubles with each submission it makes until the host next waits (2, 4, 8, ...): a
  // small model's short kernels leave the device idle after every pair, and each submission costs the host
  // about 5 us on NVIDIA (TVMGEN_VULKAN_LOG's host_us): the selfie segmenter's 10 dispatches took 4.5
  // submissions a run that way.
  int idle_submit_at = 2;
  void Dispatched() {
    counts.dispatches++;
    if (capturing != nullptr) {  // a recorded run is submitted whole, at its end
      capturing->dispatches++;
      return;
    }
    if (dispatches_per_submit <= 0) return;
    if (++dispatches >= dispatches_per_submit) {
      Submit();
    } else if (submit_when_idle && dispatches >= idle_submit_at && DeviceIdle()) {
      idle_submit_at *= 2;
      Submit();
    }
  }
  bool DeviceIdle() {
    return in_flight.empty() || api.GetFenceStatus(device, in_flight.back().fence) == VK_SUCCESS;
  }

  // Everything recorded so far, submitted and finished.
  void Flush() {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!recording && in_flight.empty()) return;
    Submit();
    int64_t t0 = host_timing ? NowNs() : 0;
    std::vector<VkFence> fences;
    for (const Submitted& s : in_flight) fences.push_back(s.fence);
    // The last submission finishes after the others (one queue, barriers between dispatches): poll it
    // for up to 2 ms before sleeping in vkWaitForFences, whose wake-up costs tens of microseconds
    // (a model's run is often well under a millisecond on a GPU).
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (api.GetFenceStatus(device, fences.back()) == VK_NOT_READY && std::chrono::steady_clock::now() < spin_until) {
    }
    TVMGEN_VK_CHECK(api.WaitForFences(device, static_cast<uint32_t>(fences.size()), fences.data(), VK_TRUE, UINT64_MAX),
                    "vkWaitForFences");
    int64_t t1 = host_timing ? NowNs() : 0;
    idle_submit_at = 2;
    TVMGEN_VK_CHECK(api.ResetFences(device, static_cast<uint32_t>(fences.size()), fences.data()), "vkResetFences");
    for (const Submitted& s : in_flight) {
      if (!s.keep) {
        TVMGEN_VK_CHECK(api.ResetCommandBuffer(s.cmd, 0), "vkResetCommandBuffer");
        spare_cmds.push_back(s.cmd);
      }
      spare_fences.push_back(s.fence);
    }
    in_flight.clear();
    TVMGEN_VK_CHECK(api.ResetDescriptorPool(device, descriptors, 0), "vkResetDescriptorPool");
    pending_sets = 0;
    for (Buffer* b : doomed) Destroy(b);
    doomed.clear();
    if (used_queries > 0) {
      std::vector<uint64_t> ts(used_queries);
      TVMGEN_VK_CHECK(api.GetQueryPoolResults(device, queries, 0, used_queries, ts.size() * 8, ts.data(), 8,
                                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                      "vkGetQueryPoolResults");
      uint64_t mask = timestamp_bits >= 64 ? ~0ull : ((1ull << timestamp_bits) - 1);
      for (uint32_t i = 0; i + 1 < used_queries; i += 2) {
        uint64_t ticks = (ts[i + 1] - ts[i]) & mask;
        auto& t = kernel_times[query_kernels[i / 2]];
        t.first += 1;
        t.second += static_cast<int64_t>(ticks * static_cast<double>(props.limits.timestampPeriod));
      }
      used_queries = 0;
      query_kernels.clear();
    }
    if (host_timing) {
      int64_t t2 = NowNs();
      host.wait_ns += t1 - t0;
      host.reset_ns += t2 - t1;
      host.flushes++;
    }
  }

  // Compute and transfer writes before it are visible to compute and transfer after it.
  // `compute_only`: between dispatches, with no copy since the last barrier (compute to compute stage,
  // shader accesses only); otherwise compute and transfer on both sides.
  void Barrier(bool compute_only = false) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    if (!compute_only || copied_since_barrier || wide_barriers) {
      mb.srcAccessMask |= VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask |= VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      stages |= VK_PIPELINE_STAGE_TRANSFER_BIT;
    }
    api.CmdPipelineBarrier(cmd, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
    counts.barriers++;
    if (capturing != nullptr) capturing->barriers++;
    written_since_barrier.clear();
    read_since_barrier.clear();
    copied_since_barrier = false;
  }

  // Before a dispatch that reads `reads` and writes `writes` (recording): a barrier if it depends on
  // a command since the last barrier (read after write, write after write, write after read).
  void BarrierFor(const std::vector<const Buffer*>& reads, const std::vector<const Buffer*>& writes,
                  bool copy = false) {
    NoteAccess(reads, writes);
    bool need = every_dispatch_barrier || profiling;
    for (const Buffer* b : reads) need = need || Has(written_since_barrier, b);
    for (const Buffer* b : writes) need = need || Has(written_since_barrier, b) || Has(read_since_barrier, b);
    if (need) Barrier(/*compute_only=*/!copy);
    copied_since_barrier = copied_since_barrier || copy;
    for (const Buffer* b : reads) {
      if (!Has(read_since_barrier, b)) read_since_barrier.push_back(b);
    }
    for (const Buffer* b : writes) {
      if (!Has(written_since_barrier, b)) written_since_barrier.push_back(b);
    }
  }

  // The descriptor set of a launch of the kernel with `layout` on `bufs` (binding order).
  std::vector<Buffer*> launch_bufs;  // Launch's scratch: one dispatch's buffers, reads, writes, push constants
  std::vector<const Buffer*> launch_reads, launch_writes;
  std::vector<uint32_t> launch_push;
  std::vector<uint64_t> set_key;  // DescriptorSet's lookup key, reused (no allocation per dispatch)
  VkDescriptorSet DescriptorSet(VkDescriptorSetLayout layout, const std::vector<Buffer*>& bufs) {
    std::vector<uint64_t>& key = set_key;
    key.clear();
    if (set_cache_on && set_pool != VK_NULL_HANDLE) {
      key.push_back(reinterpret_cast<uint64_t>(layout));
      for (const Buffer* b : bufs) key.push_back(b->id);
      auto it = set_cache.find(key);
      if (it != set_cache.end()) {
        counts.sets_reused++;
        return it->second;
      }
    }
    VkDescriptorSet set = VK_NULL_HANDLE;
    if (!key.empty()) {
      VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
      ai.descriptorPool = set_pool;
      ai.descriptorSetCount = 1;
      ai.pSetLayouts = &layout;
      if (api.AllocateDescriptorSets(device, &ai, &set) != VK_SUCCESS) set = VK_NULL_HANDLE;  // full
    }
    bool cached = set != VK_NULL_HANDLE;
    if (!cached) {
      // a set of the per-submit pool is reset after the run: a recorded run cannot keep it
      if (capturing != nullptr) FailCapture("a descriptor set outside the kept ones (TVMGEN_VULKAN_SET_CACHE=0, or the pool full)");
      set = AllocateSet(layout);
    }
    std::vector<VkDescriptorBufferInfo> infos(bufs.size());
    std::vector<VkWriteDescriptorSet> writes(bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) {
      infos[i] = VkDescriptorBufferInfo{bufs[i]->buffer, 0, VK_WHOLE_SIZE};
      writes[i] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
      writes[i].dstSet = set;
      writes[i].dstBinding = static_cast<uint32_t>(i);
      writes[i].descriptorCount = 1;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &infos[i];
    }
    api.UpdateDescriptorSets(device, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
    counts.sets_written++;
    if (cached) set_cache.emplace(key, set);
    return set;
  }

  VkDescriptorSet AllocateSet(VkDescriptorSetLayout layout) {
    if (pending_sets >= kMaxSets) Flush();
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = descriptors;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    VkResult r = api.AllocateDescriptorSets(device, &ai, &set);
    if (r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL) {
      Flush();
      r = api.AllocateDescriptorSets(device, &ai, &set);
    }
    TVMGEN_VK_CHECK(r, "vkAllocateDescriptorSets");
    ++pending_sets;
    return set;
  }

  // ---- recorded runs
  // Model::Run (runtime.cc) records a steady run of a model once and then submits that command buffer
  // again instead of running the VM: the same dispatches on the same buffers, with no host work between
  // them (a run's VM calls, the recording, the several submissions; the device gets the whole run at
  // once). Sound only for a run whose commands do not depend on the host: a run that copies to or from
  // the host or waits for the device in its middle (the VM reading a condition, a CPU kernel reading a
  // GPU tensor), or that uses a descriptor set outside the kept ones, fails to record (its commands are
  // submitted as usual). TVM's memory pool hands the buffers a run frees to whatever allocates next, in
  // any model of the process, so a recording is dropped (`invalidated`; the run takes the VM again)
  // - when a buffer it uses is freed;
  // - when a command that is not recorded (a VM's run, a copy, the host's write to mapped memory) writes a
  //   buffer it writes: another model may keep data there (its weights, as a VM copies them at its load);
  // - at a replay, when a buffer it writes holds another model's results (Hold; results are written by
  //   that model's recorded run too).
  // Another model's recorded run may share its temporaries: a run writes those before it reads them.
  // TVMGEN_VULKAN_REPLAY=0: never.
  struct Capture {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    std::vector<Buffer*> uses, writes;  // the buffers its commands use, and of those the ones they write
    int dispatches = 0, barriers = 0;
    bool valid = true;
  };
  bool replay_on = true;
  std::map<int64_t, Capture> captures;
  int64_t next_capture = 1;
  Capture* capturing = nullptr;
  int64_t capturing_id = 0;
  std::thread::id capturing_thread;  // the run's: another thread's commands are not part of it
  std::string last_capture_failure;

  void NoteAccess(const std::vector<const Buffer*>& reads, const std::vector<const Buffer*>& writes) {
    if (capturing != nullptr && std::this_thread::get_id() != capturing_thread) {
      FailCapture("another thread recorded commands during the run");
    }
    if (capturing != nullptr) {
      Capture& c = *capturing;
      for (const std::vector<const Buffer*>* v : {&reads, &writes}) {
        for (const Buffer* cb : *v) {
          Buffer* b = const_cast<Buffer*>(cb);
          if (std::find(c.uses.begin(), c.uses.end(), b) == c.uses.end()) {
            c.uses.push_back(b);
            b->capture_uses++;
          }
        }
      }
      for (const Buffer* cb : writes) {
        Buffer* b = const_cast<Buffer*>(cb);
        if (std::find(c.writes.begin(), c.writes.end(), b) == c.writes.end()) {
          c.writes.push_back(b);
          b->capture_writes++;
        }
      }
      return;
    }
    for (const Buffer* b : writes) {
      if (b->capture_writes > 0) DropCaptures(b, &Capture::writes);
    }
  }
  // The host writes `b` (mapped memory).
  void NoteHostWrite(const Buffer* b) {
    if (b->capture_writes > 0) DropCaptures(b, &Capture::writes);
  }
  // The valid recordings (not the one being made) whose `list` (uses or writes) holds `b`, dropped.
  void DropCaptures(const Buffer* b, std::vector<Buffer*> Capture::*list) {
    for (auto& [id, c] : captures) {
      const std::vector<Buffer*>& v = c.*list;
      if (c.valid && &c != capturing && std::find(v.begin(), v.end(), b) != v.end()) {
        Release(c);
        counts.invalidated++;
      }
    }
  }
  // Each model's results after its run (Model::Run): the buffers a replay of another model must not write.
  std::unordered_map<const Buffer*, int64_t> held;
  void Hold(int64_t owner, const ffi::Array<int64_t>& ptrs) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    for (auto it = held.begin(); it != held.end();) it = it->second == owner ? held.erase(it) : std::next(it);
    for (int64_t p : ptrs) {
      auto b = buffers.find(reinterpret_cast<const void*>(p));
      if (b != buffers.end()) held[b->second] = owner;
    }
  }

  void Release(Capture& c) {
    for (Buffer* b : c.uses) b->capture_uses--;
    for (Buffer* b : c.writes) b->capture_writes--;
    c.uses.clear();
    c.writes.clear();
    if (c.cmd != VK_NULL_HANDLE) {  // never in flight here: replays wait for their run
      TVMGEN_VK_CHECK(api.ResetCommandBuffer(c.cmd, 0), "vkResetCommandBuffer");
      spare_cmds.push_back(c.cmd);
      c.cmd = VK_NULL_HANDLE;
    }
    c.valid = false;
  }
  // `b` is freed: the recordings that use it, dropped
  void InvalidateCaptures(const Buffer* b) {
    DropCaptures(b, &Capture::uses);
    if (capturing != nullptr && std::find(capturing->uses.begin(), capturing->uses.end(), b) != capturing->uses.end()) {
      FailCapture("a buffer its commands use was freed");
    }
  }
  // The run being recorded cannot be replayed: its commands (in `cmd`) go on as a normal run's.
  void FailCapture(const std::string& why) {
    Capture& c = *capturing;
    capturing = nullptr;
    c.cmd = VK_NULL_HANDLE;  // `cmd`, still being recorded, submitted as any other
    Release(c);
    captures.erase(capturing_id);
    capturing_id = 0;
    counts.capture_failed++;
    last_capture_failure = why;
    if (!capture_failure_said) {  // once a process: what the run costs instead
      capture_failure_said = true;
      std::fprintf(stderr,
                   "tvmgen-vulkan: a run could not be recorded for replay (%s): such runs launch their kernels "
                   "through the VM every time (host time per run: the VM's calls and ~1 us a dispatch; "
                   "TVMGEN_VULKAN_LOG=1 counts them)\n",
                   why.c_str());
    }
  }
  bool capture_failure_said = false;

  bool CaptureBegin() {
    std::lock_guard<std::recursive_mutex> lock(mu);
    Check();
    if (!replay_on || profiling || capturing != nullptr) return false;
    Flush();  // what was recorded before is not part of the run
    BeginRecording(0);  // submitted again: no one-time flag
    capturing_id = next_capture++;
    capturing = &captures[capturing_id];
    capturing_thread = std::this_thread::get_id();
    capturing->cmd = cmd;
    copied_since_barrier = true;
    Barrier();  // every replay: after all that was submitted before it (input copies, other models)
    return true;
  }

  // The recorded run, submitted and finished; its id, or 0 where it cannot be replayed (its commands are
  // then those of a normal run, which the caller's sync finishes).
  int64_t CaptureEnd() {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (capturing == nullptr || capturing_thread != std::this_thread::get_id()) return 0;  // failed on the way
    if (capturing->dispatches == 0) {
      FailCapture("the run dispatched no kernel");
      return 0;
    }
    Barrier();  // its writes visible to whatever follows (copies to the host, other models' kernels)
    int64_t id = capturing_id;
    capturing = nullptr;
    capturing_id = 0;
    TVMGEN_VK_CHECK(api.EndCommandBuffer(cmd), "vkEndCommandBuffer");
    recording = false;
    SubmitBuffer(cmd, /*keep=*/true);
    cmd = VK_NULL_HANDLE;
    Flush();
    Capture& c = captures[id];
    if (!c.valid) {  // a buffer it used was freed during the run (destroyed after it, in Flush)
      captures.erase(id);
      counts.capture_failed++;
      last_capture_failure = "a buffer its commands use was freed";
      return 0;
    }
    counts.captured++;
    return id;
  }

  // The recorded run `id` of model `owner` submitted again and finished; false where it is no longer valid.
  bool Replay(int64_t id, int64_t owner) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto it = captures.find(id);
    if (it == captures.end() || !it->second.valid || profiling || capturing != nullptr) return false;
    for (const Buffer* b : it->second.writes) {
      auto h = held.find(b);
      if (h != held.end() && h->second != owner) {  // another model's results are there now
        Release(it->second);
        counts.invalidated++;
        return false;
      }
    }
    Submit();  // what was recorded before it (copies) first
    SubmitBuffer(it->second.cmd, /*keep=*/true);
    // it ends with a barrier: nothing recorded after it depends on a command since one
    written_since_barrier.clear();
    read_since_barrier.clear();
    copied_since_barrier = false;
    counts.replays++;
    counts.dispatches += it->second.dispatches;
    counts.barriers += it->second.barriers;
    Flush();
    return true;
  }

  void ReleaseCapture(int64_t id) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto it = captures.find(id);
    if (it == captures.end() || &it->second == capturing) return;
    if (it->second.valid) Release(it->second);
    captures.erase(it);
  }

  // ---- memory
  // staging: host memory for copies (cached where there is such), else device-local memory.
  Buffer* Allocate(size_t nbytes, bool staging = false) {
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
        // 4 KB on an H200), so copies to the host go through a cached staging buffer there
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

  // A buffer that kernels recorded (not yet run) may use is destroyed after the next Flush, so that
  // freeing never waits for the device.
  void Free(void* ptr) {
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

  // (never while recorded or running commands may use it: see Free)
  void Destroy(Buffer* b) {
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

  // Workspaces (a kernel function's temporary buffers, allocated and freed at every call): kept and
  // reused by size, smallest fit first. Reuse inside one command buffer is safe: every dispatch is
  // followed by a full compute barrier.
  void* AllocWorkspace(size_t nbytes) {
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
  void FreeWorkspace(void* ptr) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    auto it = buffers.find(ptr);
    if (it == buffers.end()) TVM_FFI_THROW(RuntimeError) << "Vulkan: FreeWorkspace of a buffer this runtime did not allocate";
    free_workspaces.emplace(it->second->size, ptr);
  }
  std::vector<Buffer*> doomed;  // freed while recorded commands may use them: destroyed after Flush
  std::multimap<size_t, void*> free_workspaces;

  Buffer* FindArgument(const void* ptr, size_t i, const std::string& kernel) {
    auto it = buffers.find(ptr);
    if (it == buffers.end()) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan: argument " << i << " of kernel " << kernel
                                  << " is not a buffer of tvmgen's Vulkan runtime";
    }
    return it->second;
  }
  Buffer* Find(const void* ptr, const char* what) {
    auto it = buffers.find(ptr);
    if (it == buffers.end()) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan: " << what << " is not a buffer of tvmgen's Vulkan runtime";
    }
    return it->second;
  }

 private:
  bool initialised_ = false;
  bool ok_ = false;
  std::string error_;

  int MemoryType(uint32_t bits, VkMemoryPropertyFlags flags) const {
    for (uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
      if ((bits & (1u << i)) && (memory.memoryTypes[i].propertyFlags & flags) == flags) return static_cast<int>(i);
    }
    return -1;
  }

  void Init() {
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
};

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
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

// ------------------------------------------------------------------ the device API
class VulkanDeviceAPI final : public DeviceAPI {
 public:
  static VulkanDeviceAPI* Global() {
    static VulkanDeviceAPI* api = new VulkanDeviceAPI();
    return api;
  }

  void SetDevice(DLDevice dev) final {}

  void GetAttr(DLDevice dev, DeviceAttrKind kind, ffi::Any* rv) final {
    Workspace& w = Workspace::Global();
    if (kind == tvm::runtime::kExist) {
      *rv = static_cast<int64_t>(w.TryInit() && dev.device_id == 0);
      return;
    }
    if (!w.TryInit()) return;
    const auto& l = w.props.limits;
    switch (kind) {
      case tvm::runtime::kMaxThreadsPerBlock: *rv = static_cast<int64_t>(l.maxComputeWorkGroupInvocations); break;
      case tvm::runtime::kWarpSize: *rv = static_cast<int64_t>(1); break;
      case tvm::runtime::kMaxSharedMemoryPerBlock: *rv = static_cast<int64_t>(l.maxComputeSharedMemorySize); break;
      case tvm::runtime::kDeviceName: *rv = ffi::String(w.props.deviceName); break;
      case tvm::runtime::kMaxThreadDimensions: {
        std::ostringstream o;
        o << "[" << l.maxComputeWorkGroupSize[0] << ", " << l.maxComputeWorkGroupSize[1] << ", "
          << l.maxComputeWorkGroupSize[2] << "]";
        *rv = ffi::String(o.str());
        break;
      }
      case tvm::runtime::kDriverVersion: *rv = ffi::String(std::to_string(w.props.driverVersion)); break;
      case tvm::runtime::kApiVersion: *rv = static_cast<int64_t>(w.props.apiVersion); break;
      default: break;
    }
  }

  void* AllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) final {
    return Workspace::Global().Allocate(nbytes);
  }

  void FreeDataSpace(DLDevice dev, void* ptr) final {
    if (ptr != nullptr) Workspace::Global().Free(ptr);
  }

  void StreamSync(DLDevice dev, TVMStreamHandle stream) final { Workspace::Global().Flush(); }

  void* AllocWorkspace(DLDevice dev, size_t nbytes, DLDataType type_hint) final {
    return Workspace::Global().AllocWorkspace(nbytes);
  }
  void FreeWorkspace(DLDevice dev, void* ptr) final {
    if (ptr != nullptr) Workspace::Global().FreeWorkspace(ptr);
  }

  TVMStreamHandle CreateStream(DLDevice dev) final { return nullptr; }  // one queue: every stream is it
  void FreeStream(DLDevice dev, TVMStreamHandle stream) final {}
  void SyncStreamFromTo(DLDevice dev, TVMStreamHandle src, TVMStreamHandle dst) final {}
  bool SupportsDevicePointerArithmeticsOnHost() final { return false; }

 protected:
  void CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t nbytes,
                      DLDevice dev_from, DLDevice dev_to, DLDataType type_hint, TVMStreamHandle stream) final {
    if (nbytes == 0) return;
    Workspace& w = Workspace::Global();
    w.Check();
    std::lock_guard<std::recursive_mutex> lock(w.mu);
    bool from_vk = dev_from.device_type == kDLVulkan, to_vk = dev_to.device_type == kDLVulkan;
    if (from_vk && to_vk) {
      Buffer* s = w.Find(from, "the copy's source");
      Buffer* d = w.Find(to, "the copy's target");
      w.Begin();
      w.BarrierFor({s}, {d}, /*copy=*/true);
      VkBufferCopy region{from_offset, to_offset, nbytes};
      w.api.CmdCopyBuffer(w.cmd, s->buffer, d->buffer, 1, &region);
      return;
    }
    if (from_vk == to_vk) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan: cannot copy from device type " << dev_from.device_type << " to "
                                  << dev_to.device_type;
    }
    Buffer* b = w.Find(from_vk ? from : to, from_vk ? "the copy's source" : "the copy's target");
    size_t offset = from_vk ? from_offset : to_offset;
    if (offset + nbytes > b->size) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan: a copy of " << nbytes << " bytes at offset " << offset << " overruns a "
                                  << b->size << "-byte buffer";
    }
    if (b->mapped && (!from_vk || b->host_cached)) {
      if (from_vk && !w.written_since_barrier.empty()) {  // what was recorded before has run, its writes visible
        w.Begin();
        w.Barrier();
      }
      w.Flush();
      if (from_vk) {
        std::memcpy(static_cast<char*>(to) + to_offset, static_cast<const char*>(b->mapped) + offset, nbytes);
      } else {
        w.NoteHostWrite(b);
        std::memcpy(static_cast<char*>(b->mapped) + offset, static_cast<const char*>(from) + from_offset, nbytes);
      }
      return;
    }
    // Device-only memory: through a host-visible staging buffer. A copy to the host is recorded after
    // what is pending (one submit and wait); a copy from the host waits until the staging buffer is free.
    if (!from_vk) w.Flush();
    Buffer* staging = StagingBuffer(nbytes);
    w.Begin();
    VkBufferCopy region{from_vk ? offset : 0, from_vk ? 0 : offset, nbytes};
    if (!from_vk) std::memcpy(staging->mapped, static_cast<const char*>(from) + from_offset, nbytes);
    if (from_vk) {
      w.BarrierFor({b}, {staging}, /*copy=*/true);
    } else {
      w.BarrierFor({staging}, {b}, /*copy=*/true);
    }
    w.api.CmdCopyBuffer(w.cmd, from_vk ? b->buffer : staging->buffer, from_vk ? staging->buffer : b->buffer, 1, &region);
    w.Barrier();
    w.Flush();
    if (from_vk) std::memcpy(static_cast<char*>(to) + to_offset, staging->mapped, nbytes);
  }

 private:
  Buffer* staging_ = nullptr;

  Buffer* StagingBuffer(size_t nbytes) {
    Workspace& w = Workspace::Global();
    if (staging_ != nullptr && staging_->size >= nbytes) return staging_;
    if (staging_ != nullptr) w.Free(staging_);
    staging_ = w.Allocate(std::max<size_t>(nbytes, 1 << 20), true);
    if (staging_->mapped == nullptr) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan device " << w.props.deviceName << " gave no host-visible memory";
    }
    return staging_;
  }
};

// ------------------------------------------------------------------ the pipeline cache on disk
bool LogOn() {
  static const bool on = [] {
    const char* v = std::getenv("TVMGEN_VULKAN_LOG");
    return v != nullptr && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

struct CacheStats {
  // hits / misses: modules whose pipeline cache file was (not) found and valid; cached / built: pipelines
  // created with / without one; corrupt: entries deleted; create_ms: the drivers' pipeline creation.
  std::atomic<int64_t> hits{0}, misses{0}, corrupt{0}, writes{0}, write_errors{0}, cached{0}, built{0};
  std::atomic<int64_t> create_us{0}, launch_waits{0};
};

// The cache directory's entries: ../common/disk_cache.h (the file format and directory described at the top).
class PipelineCacheDir : public DiskCache<CacheStats> {
 public:
  static PipelineCacheDir& Global() {
    static PipelineCacheDir* c = new PipelineCacheDir();
    return *c;
  }
  PipelineCacheDir() : DiskCache({"TVMGENVC", ".vkpc", "TVMGEN_VULKAN_CACHE_DIR", "vulkan", "tvmgen-vulkan", &LogOn}) {}

  static std::string Key(const std::string& payload_sha, const VkPhysicalDeviceProperties& p) {
    std::ostringstream o;
    o << "tvmgen-vulkan-pipeline-cache 1\npayload-sha256=" << payload_sha << "\ndevice=" << p.deviceName
      << "\nvendor=" << p.vendorID << "\ndevice-id=" << p.deviceID << "\ndriver=" << p.driverVersion << "\nuuid=";
    for (uint8_t b : p.pipelineCacheUUID) o << static_cast<int>(b) << ".";
    o << "\n";
    return o.str();
  }

  std::string StatsJson() {
    std::ostringstream o;
    // source_builds: as the OpenCL cache's counters name pipelines built without a cache (benchmarks/gpu.py)
    o << "{\"hits\": " << stats.hits << ", \"misses\": " << stats.misses << ", \"corrupt\": " << stats.corrupt
      << ", \"writes\": " << stats.writes << ", \"write_errors\": " << stats.write_errors
      << ", \"pipelines_cached\": " << stats.cached << ", \"source_builds\": " << stats.built
      << ", \"create_ms\": " << stats.create_us / 1000.0 << ", \"launch_waits\": " << stats.launch_waits
      << ", \"dir\": \"" << JsonEscape(Dir()) << "\"}";
    return o.str();
  }
};

// ------------------------------------------------------------------ the kernel module
struct Kernel {
  std::string name;
  std::vector<DLDataType> arg_types;
  std::vector<std::string> launch_tags;
  uint32_t workgroup[3] = {1, 1, 1};
  uint32_t buffers = 0;
  uint32_t push_bytes = 0;
  std::string spirv;
  // per binding: the shader only reads it (a `readonly` buffer in its GLSL); others count as written
  std::vector<bool> readonly;
  // created once (std::call_once): by the module's background threads, or by the first launch
  std::once_flag created;
  std::string error;  // why creating it failed (thrown at its launch)
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

// The pipelines of one kernel module: created through its VkPipelineCache, which is read from the cache
// directory first and written there once every pipeline exists (if it was not read).
struct Pipelines {
  std::vector<std::shared_ptr<Kernel>> kernels;
  std::string key;  // the cache key ("" when Vulkan is unavailable)
  VkPipelineCache cache = VK_NULL_HANDLE;
  bool from_disk = false;
  std::atomic<size_t> done{0};
  std::atomic<size_t> next{0};  // the background threads' next kernel
};

// The module blob's reader (../common/blob_reader.h), with this backend's words for a blob it cannot read.
constexpr const char* kBlobTruncated =
    "the Vulkan module in this library is truncated or of an unknown format (was it compiled by this tvmgen?)";

class VulkanModule : public ffi::ModuleObj {
 public:
  VulkanModule(std::string blob, std::map<std::string, std::shared_ptr<Kernel>> kernels)
      : blob_(std::move(blob)), kernels_(std::move(kernels)), pipelines_(std::make_shared<Pipelines>()) {
    for (auto& [name, k] : kernels_) pipelines_->kernels.push_back(k);
    StartPipelines();
  }

  const char* kind() const final { return "vulkan"; }
  int GetPropertyMask() const final { return ffi::Module::kBinarySerializable | ffi::Module::kRunnable; }
  ffi::Bytes SaveToBytes() const final { return ffi::Bytes(blob_.data(), blob_.size()); }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    if (name == "__tvmgen_vulkan_prepare") {  // (device_id, wait) -> JSON, for Model::Prepare
      std::shared_ptr<Pipelines> pl = pipelines_;
      return ffi::Function::FromTyped([pl](int64_t device_id, bool wait) -> ffi::String {
        return ffi::String(Prepare(*pl, wait));
      });
    }
    auto it = kernels_.find(std::string(name));
    if (it == kernels_.end()) return std::nullopt;
    std::shared_ptr<Kernel> k = it->second;
    ffi::ObjectPtr<ffi::Object> self = ffi::GetObjectPtr<ffi::Object>(this);
    std::shared_ptr<Pipelines> pl = pipelines_;
    return ffi::Function::FromPacked([self, k, pl](ffi::PackedArgs args, ffi::Any* rv) { Launch(*k, *pl, args); });
  }

 private:
  std::string blob_;
  std::map<std::string, std::shared_ptr<Kernel>> kernels_;
  std::shared_ptr<Pipelines> pipelines_;

  // The module's VkPipelineCache (from disk when there is a valid entry), then its pipelines created by
  // background threads. Without a Vulkan device nothing starts: the launches report it.
  void StartPipelines() {
    Workspace& w = Workspace::Global();
    if (!w.TryInit() || pipelines_->kernels.empty()) return;
    PipelineCacheDir& dir = PipelineCacheDir::Global();
    Pipelines& pl = *pipelines_;
    pl.key = PipelineCacheDir::Key(Sha256Hex(blob_), w.props);
    std::string path;
    std::string data = dir.Read(pl.key, &path);
    VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = data.size();
    ci.pInitialData = data.empty() ? nullptr : data.data();
    VkResult r = w.api.CreatePipelineCache(w.device, &ci, nullptr, &pl.cache);
    if (r != VK_SUCCESS && !data.empty()) {  // the driver refused the data: start empty
      dir.Discard(path, std::string("the driver refused it: ") + ResultName(r));
      data.clear();
      ci.initialDataSize = 0;
      ci.pInitialData = nullptr;
      r = w.api.CreatePipelineCache(w.device, &ci, nullptr, &pl.cache);
    }
    if (r != VK_SUCCESS) {
      pl.cache = VK_NULL_HANDLE;
      pl.key.clear();
    }
    pl.from_disk = !data.empty();
    (pl.from_disk ? dir.stats.hits : dir.stats.misses)++;
    if (const char* v = std::getenv("TVMGEN_VULKAN_BACKGROUND_PIPELINES")) {
      if (std::strcmp(v, "0") == 0) return;  // each pipeline at its kernel's first launch
    }
    size_t threads = std::min<size_t>({8, std::max(1u, std::thread::hardware_concurrency()), pl.kernels.size()});
    std::shared_ptr<Pipelines> keep = pipelines_;
    for (size_t t = 0; t < threads; ++t) {
      std::thread([keep]() {
        for (size_t i; (i = keep->next++) < keep->kernels.size();) {
          Kernel& k = *keep->kernels[i];
          std::call_once(k.created, [&]() { CreateRecorded(k, *keep); });
        }
      }).detach();
    }
  }

  // Every pipeline of the module created (waiting for the background threads' ones), when `wait`:
  // {"programs": 1, "kernels", "built", "cached", "ms"} (the counts of PrepareStats; pipelines "built"
  // without a cache entry, "cached" with one). A creation failure is thrown here.
  static std::string Prepare(Pipelines& pl, bool wait) {
    auto t0 = std::chrono::steady_clock::now();
    int built = 0, cached = 0;
    if (wait) {
      Workspace::Global().Check();
      for (const auto& k : pl.kernels) {
        std::call_once(k->created, [&]() { CreateRecorded(*k, pl); });
        if (k->pipeline == VK_NULL_HANDLE) {
          TVM_FFI_THROW(RuntimeError) << "Vulkan: creating the pipeline of kernel " << k->name << " failed: " << k->error;
        }
        (pl.from_disk ? cached : built)++;
      }
    }
    std::ostringstream o;
    o << "{\"programs\": 1, \"kernels\": " << pl.kernels.size() << ", \"built\": " << built << ", \"cached\": " << cached
      << ", \"ms\": " << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() << "}";
    return o.str();
  }

  // Create k's pipeline, remembering a failure for its launch; the last pipeline of the module writes
  // the pipeline cache to disk.
  static void CreateRecorded(Kernel& k, Pipelines& pl) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      Create(k, pl.cache);
    } catch (const ffi::Error& e) {
      k.error = e.message();
    } catch (const std::exception& e) {
      k.error = e.what();
    }
    PipelineCacheDir& dir = PipelineCacheDir::Global();
    dir.stats.create_us +=
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    (pl.from_disk ? dir.stats.cached : dir.stats.built)++;
    if (++pl.done == pl.kernels.size() && !pl.from_disk && pl.cache != VK_NULL_HANDLE) {
      Workspace& w = Workspace::Global();
      size_t n = 0;
      if (w.api.GetPipelineCacheData(w.device, pl.cache, &n, nullptr) == VK_SUCCESS && n > 0) {
        std::string data(n, '\0');
        if (w.api.GetPipelineCacheData(w.device, pl.cache, &n, &data[0]) == VK_SUCCESS) {
          data.resize(n);
          dir.Write(pl.key, data);
        }
      }
    }
  }

  static void Create(Kernel& k, VkPipelineCache cache) {
    Workspace& w = Workspace::Global();
    const Api& api = w.api;
    if (k.push_bytes > w.props.limits.maxPushConstantsSize) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << " needs " << k.push_bytes
                                  << " bytes of push constants; the device has " << w.props.limits.maxPushConstantsSize;
    }
    std::vector<VkDescriptorSetLayoutBinding> bindings(k.buffers);
    for (uint32_t i = 0; i < k.buffers; ++i) {
      bindings[i] = VkDescriptorSetLayoutBinding{i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT,
                                                 nullptr};
    }
    VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dl.bindingCount = k.buffers;
    dl.pBindings = bindings.data();
    TVMGEN_VK_CHECK(api.CreateDescriptorSetLayout(w.device, &dl, nullptr, &k.set_layout), "vkCreateDescriptorSetLayout");
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, k.push_bytes};
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &k.set_layout;
    pl.pushConstantRangeCount = k.push_bytes ? 1 : 0;
    pl.pPushConstantRanges = &range;
    TVMGEN_VK_CHECK(api.CreatePipelineLayout(w.device, &pl, nullptr, &k.layout), "vkCreatePipelineLayout");
    VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sm.codeSize = k.spirv.size();
    sm.pCode = reinterpret_cast<const uint32_t*>(k.spirv.data());
    VkShaderModule shader;
    TVMGEN_VK_CHECK(api.CreateShaderModule(w.device, &sm, nullptr, &shader), "vkCreateShaderModule (" + k.name + ")");
    VkComputePipelineCreateInfo cp{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cp.stage = VkPipelineShaderStageCreateInfo{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    cp.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cp.stage.module = shader;
    cp.stage.pName = "main";
    cp.layout = k.layout;
    VkResult r = api.CreateComputePipelines(w.device, cache, 1, &cp, nullptr, &k.pipeline);
    api.DestroyShaderModule(w.device, shader, nullptr);
    TVMGEN_VK_CHECK(r, "vkCreateComputePipelines (" + k.name + ")");
  }

  static void Launch(Kernel& k, Pipelines& pl, ffi::PackedArgs args) {
    Workspace& w = Workspace::Global();
    w.Check();
    std::lock_guard<std::recursive_mutex> lock(w.mu);
    int64_t t0 = w.host_timing ? Workspace::NowNs() : 0;
    size_t nargs = k.arg_types.size();
    if (static_cast<size_t>(args.size()) < nargs + k.launch_tags.size()) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << " takes " << nargs + k.launch_tags.size()
                                  << " arguments, " << args.size() << " were given";
    }
    if (k.pipeline == VK_NULL_HANDLE) {
      PipelineCacheDir::Global().stats.launch_waits++;
      std::call_once(k.created, [&]() { CreateRecorded(k, pl); });
      if (k.pipeline == VK_NULL_HANDLE) {
        TVM_FFI_THROW(RuntimeError) << "Vulkan: creating the pipeline of kernel " << k.name << " failed: " << k.error;
      }
    }
    // the workspace's vectors, reused (no allocation per dispatch; Launch holds the workspace's lock)
    std::vector<Buffer*>& bufs = w.launch_bufs;
    std::vector<const Buffer*>& reads = w.launch_reads;
    std::vector<const Buffer*>& writes = w.launch_writes;
    std::vector<uint32_t>& push = w.launch_push;
    bufs.clear();
    reads.clear();
    writes.clear();
    push.clear();
    for (size_t i = 0; i < nargs; ++i) {
      const DLDataType& t = k.arg_types[i];
      if (t.code == kDLOpaqueHandle) {
        const TVMFFIAny& raw = reinterpret_cast<const TVMFFIAny*>(args.data())[i];
        void* ptr = nullptr;
        if (raw.type_index == ffi::TypeIndex::kTVMFFIOpaquePtr) {
          ptr = raw.v_ptr;
        } else if (raw.type_index == ffi::TypeIndex::kTVMFFIDLTensorPtr) {
          ptr = static_cast<DLTensor*>(raw.v_ptr)->data;
        } else if (auto tensor = args[i].try_cast<ffi::Tensor>()) {
          ptr = tensor->data_ptr();
        }
        Buffer* b = w.FindArgument(ptr, i, k.name);
        size_t binding = bufs.size();
        bufs.push_back(b);
        (binding < k.readonly.size() && k.readonly[binding] ? reads : writes).push_back(b);
      } else if (t.code == kDLFloat) {
        float f = static_cast<float>(args[i].cast<double>());
        uint32_t u;
        std::memcpy(&u, &f, 4);
        push.push_back(u);
      } else {
        int64_t v = 0;
        if (auto x = args[i].try_cast<int64_t>()) {
          v = *x;
        } else {
          v = args[i].cast<bool>();
        }
        if (v > INT32_MAX || v < INT32_MIN) {
          TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << ": argument " << i << " = " << v
                                      << " does not fit the 32-bit integers tvmgen's Vulkan kernels use";
        }
        push.push_back(static_cast<uint32_t>(static_cast<int32_t>(v)));
      }
    }
    uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    for (size_t j = 0; j < k.launch_tags.size(); ++j) {
      const std::string& tag = k.launch_tags[j];
      int64_t v = args[nargs + j].cast<int64_t>();
      if (tag.size() == 10 && tag.rfind("blockIdx.", 0) == 0) {
        grid[tag[9] - 'x'] = static_cast<uint32_t>(std::max<int64_t>(v, 1));
      } else if (tag.size() == 11 && tag.rfind("threadIdx.", 0) == 0) {
        block[tag[10] - 'x'] = static_cast<uint32_t>(std::max<int64_t>(v, 1));
      }
    }
    for (int d = 0; d < 3; ++d) {
      if (block[d] != k.workgroup[d]) {
        TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << ": launched with " << block[0] << "x" << block[1]
                                    << "x" << block[2] << " threads, compiled for " << k.workgroup[0] << "x"
                                    << k.workgroup[1] << "x" << k.workgroup[2];
      }
    }
    VkDescriptorSet set = w.DescriptorSet(k.set_layout, bufs);
    w.BeginTimed(k.name);  // first: it may submit what was recorded before (its query pool full)
    w.Begin();
    w.BarrierFor(reads, writes);
    w.api.CmdBindPipeline(w.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline);
    w.api.CmdBindDescriptorSets(w.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0, nullptr);
    if (!push.empty()) {
      w.api.CmdPushConstants(w.cmd, k.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                             static_cast<uint32_t>(push.size() * 4), push.data());
    }
    w.WriteStart();
    w.api.CmdDispatch(w.cmd, grid[0], grid[1], grid[2]);
    w.EndTimed();
    if (w.host_timing) w.host.launch_ns += Workspace::NowNs() - t0;  // before Dispatched: its submits count there
    w.Dispatched();
  }
};

// Which of a kernel's `n` bindings its GLSL declares `readonly` in every declaration of the binding
// (tvmgen's printer: "layout(std430, set = 0, binding = I) restrict [readonly ]buffer ..."; a vec4 view
// is a second declaration of the same binding). Bindings it does not declare count as written.
std::vector<bool> ReadonlyBindings(const std::string& glsl, uint32_t n) {
  std::vector<int> state(n, 0);  // 0: not seen, 1: read only so far, 2: written
  const std::string head = "layout(std430, set = 0, binding = ";
  for (size_t at = glsl.find(head); at != std::string::npos; at = glsl.find(head, at + 1)) {
    size_t end = glsl.find('\n', at);
    std::string line = glsl.substr(at, end == std::string::npos ? std::string::npos : end - at);
    unsigned long b = std::strtoul(line.c_str() + head.size(), nullptr, 10);
    if (b >= n) continue;
    bool ro = line.find(" readonly buffer ") != std::string::npos;
    state[b] = (ro && state[b] != 2) ? 1 : 2;
  }
  std::vector<bool> out(n);
  for (uint32_t i = 0; i < n; ++i) out[i] = state[i] == 1;
  return out;
}

ffi::Module LoadFromBytes(const ffi::Bytes& bytes) {
  std::string blob(bytes.data(), bytes.size());
  BlobReader r(blob.data(), blob.size(), kBlobTruncated);
  std::string magic(r.Take(8), 8);
  if (magic != "TVMGENVK") {
    TVM_FFI_THROW(RuntimeError) << "the Vulkan module in this library is not tvmgen's (no TVMGENVK header): "
                                << "compile the model with tvmgen compile --device vulkan";
  }
  r.Pod<uint64_t>();  // total length
  uint32_t version = r.Pod<uint32_t>();
  if (version != 1) TVM_FFI_THROW(RuntimeError) << "Vulkan module format " << version << " is not supported";
  uint32_t count = r.Pod<uint32_t>();
  std::map<std::string, std::shared_ptr<Kernel>> kernels;
  for (uint32_t i = 0; i < count; ++i) {
    auto k = std::make_shared<Kernel>();
    k->name = r.Str();
    uint32_t na = r.Pod<uint32_t>();
    for (uint32_t j = 0; j < na; ++j) {
      DLDataType t;
      t.code = r.Pod<uint8_t>();
      t.bits = r.Pod<uint8_t>();
      t.lanes = r.Pod<uint16_t>();
      k->arg_types.push_back(t);
    }
    uint32_t nt = r.Pod<uint32_t>();
    for (uint32_t j = 0; j < nt; ++j) k->launch_tags.push_back(r.Str());
    for (int d = 0; d < 3; ++d) k->workgroup[d] = r.Pod<uint32_t>();
    k->buffers = r.Pod<uint32_t>();
    k->push_bytes = r.Pod<uint32_t>();
    k->spirv = r.Str();
    k->readonly = ReadonlyBindings(r.Str(), k->buffers);  // from the GLSL source
    // TVMGEN_VULKAN_SPIRV_DIR: <dir>/<kernel>.spv replaces the kernel's SPIR-V (same bindings and push
    // constants): to time a hand-edited shader on a device without rebuilding the model
    if (const char* dir = std::getenv("TVMGEN_VULKAN_SPIRV_DIR")) {
      std::ifstream f(std::string(dir) + "/" + k->name + ".spv", std::ios::binary);
      if (f) {
        k->spirv.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        if (LogOn()) std::fprintf(stderr, "tvmgen-vulkan: %s from %s\n", k->name.c_str(), dir);
      }
    }
    if (k->spirv.size() % 4 != 0) TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k->name << ": bad SPIR-V size";
    kernels[k->name] = k;
  }
  return ffi::Module(ffi::make_object<VulkanModule>(std::move(blob), std::move(kernels)));
}

struct Registration {
  Registration() {
    auto set = [](const char* name, ffi::Function f) { ffi::Function::SetGlobal(name, std::move(f), true); };
    set("device_api.vulkan", ffi::Function::FromTyped([]() -> void* {
          return static_cast<DeviceAPI*>(VulkanDeviceAPI::Global());
        }));
    set("ffi.Module.load_from_bytes.vulkan", ffi::Function::FromTyped(LoadFromBytes));
    set("tvmgen.vulkan.info", ffi::Function::FromTyped([]() { return ffi::String(InfoJson()); }));
    RegisterCacheAndProfiling<PipelineCacheDir, Workspace>("vulkan");
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
    if (LogOn()) {
      std::atexit([] {
        std::fprintf(stderr, "tvmgen-vulkan: cache %s\n", PipelineCacheDir::Global().StatsJson().c_str());
        std::fprintf(stderr, "tvmgen-vulkan: commands %s\n", Workspace::Global().CountsJson().c_str());
      });
    }
  }
};
Registration registration;

}  // namespace vulkan
}  // namespace tvmgen

// ------------------------------------------------------------------ C API (for apps and JNI)
extern "C" {
/*! \brief Set the Vulkan pipeline cache directory ("" turns the cache off). Returns 0. */
__attribute__((visibility("default"))) int TVMGenVulkanSetCacheDir(const char* dir) {
  tvmgen::vulkan::PipelineCacheDir::Global().SetDir(dir ? dir : "");
  return 0;
}
}
