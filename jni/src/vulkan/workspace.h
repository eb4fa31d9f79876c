// The Vulkan workspace: one instance, device and compute queue for the process; its buffers, the command
// buffers recorded and submitted, barriers, descriptor sets, timestamps, and recorded runs.
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
// Profiling (tvmgen.vulkan.profiling(true)): each dispatch is bracketed by vkCmdWriteTimestamp (after
// the work before it, at the end of its own), read back when the command buffer has run, and summed per
// kernel (tvmgen.vulkan.kernel_times(): {kernel: [launches, ns]}), as libtvmgen_opencl does with events.
//
// The methods: workspace.cc (set-up, memory, counters), workspace_commands.cc (command buffers,
// barriers, descriptor sets, profiling), recorded_runs.cc (recorded runs).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vulkan_common.h"

namespace tvmgen {
namespace vulkan {

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
  // TVMGEN_VULKAN_BARRIERS=all: a barrier before every dispatch (to compare).
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
  std::string CountsJson();
  // profiling: timestamps around each dispatch of the command buffer being recorded
  bool profiling = false;
  VkQueryPool queries = VK_NULL_HANDLE;
  static constexpr uint32_t kMaxQueries = 4096;  // 2 per dispatch
  uint32_t used_queries = 0;
  std::vector<std::string> query_kernels;  // the kernel of each pair of queries recorded
  std::map<std::string, std::pair<int64_t, int64_t>> kernel_times;  // kernel -> (launches, ns)

  bool SetProfiling(bool on);

  std::map<std::string, std::pair<int64_t, int64_t>> TakeKernelTimes();

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
  // 32: each submission costs NVIDIA's device time, and 8 -> 32 took EfficientNet-B0 from 2.02 to 1.87 ms,
  // MobileNetV3-Small 0.75 -> 0.66 on a discrete GPU; a run's first dispatches go at once (Dispatched)
  int dispatches_per_submit = 32;

  void Begin() {
    if (recording) return;
    BeginRecording(VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
  }
  // `cmd` (a spare command buffer, or a new one) begun with `flags`.
  void BeginRecording(VkCommandBufferUsageFlags flags);

  // What `cmd` holds, submitted; not waited for.
  void Submit();
  // The ended command buffer `c`, submitted with a fence of its own; `keep`: a recorded run's, not reset after.
  void SubmitBuffer(VkCommandBuffer c, bool keep);

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
  void Dispatched();
  bool DeviceIdle() {
    return in_flight.empty() || api.GetFenceStatus(device, in_flight.back().fence) == VK_SUCCESS;
  }

  // Everything recorded so far, submitted and finished.
  void Flush();

  // Compute and transfer writes before it are visible to compute and transfer after it.
  // `compute_only`: between dispatches, with no copy since the last barrier (compute to compute stage,
  // shader accesses only); otherwise compute and transfer on both sides.
  void Barrier(bool compute_only = false);

  // Before a dispatch that reads `reads` and writes `writes` (recording): a barrier if it depends on
  // a command since the last barrier (read after write, write after write, write after read).
  void BarrierFor(const std::vector<const Buffer*>& reads, const std::vector<const Buffer*>& writes,
                  bool copy = false);

  // The descriptor set of a launch of the kernel with `layout` on `bufs` (binding order).
  std::vector<Buffer*> launch_bufs;  // Launch's scratch: one dispatch's buffers, reads, writes, push constants
  std::vector<const Buffer*> launch_reads, launch_writes;
  std::vector<uint32_t> launch_push;
  std::vector<uint64_t> set_key;  // DescriptorSet's lookup key, reused (no allocation per dispatch)
  VkDescriptorSet DescriptorSet(VkDescriptorSetLayout layout, const std::vector<Buffer*>& bufs);

  VkDescriptorSet AllocateSet(VkDescriptorSetLayout layout);

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

  void NoteAccess(const std::vector<const Buffer*>& reads, const std::vector<const Buffer*>& writes);
  // The host writes `b` (mapped memory).
  void NoteHostWrite(const Buffer* b) {
    if (b->capture_writes > 0) DropCaptures(b, &Capture::writes);
  }
  // The valid recordings (not the one being made) whose `list` (uses or writes) holds `b`, dropped.
  void DropCaptures(const Buffer* b, std::vector<Buffer*> Capture::*list);
  // Each model's results after its run (Model::Run): the buffers a replay of another model must not write.
  std::unordered_map<const Buffer*, int64_t> held;
  void Hold(int64_t owner, const ffi::Array<int64_t>& ptrs);

  void Release(Capture& c);
  // `b` is freed: the recordings that use it, dropped
  void InvalidateCaptures(const Buffer* b);
  // The run being recorded cannot be replayed: its commands (in `cmd`) go on as a normal run's.
  void FailCapture(const std::string& why);
  bool capture_failure_said = false;

  bool CaptureBegin();

  // The recorded run, submitted and finished; its id, or 0 where it cannot be replayed (its commands are
  // then those of a normal run, which the caller's sync finishes).
  int64_t CaptureEnd();

  // The recorded run `id` of model `owner` submitted again and finished; false where it is no longer valid.
  bool Replay(int64_t id, int64_t owner);

  void ReleaseCapture(int64_t id);

  // ---- memory
  // staging: host memory for copies (cached where there is such), else device-local memory.
  Buffer* Allocate(size_t nbytes, bool staging = false);

  // A buffer that kernels recorded (not yet run) may use is destroyed after the next Flush, so that
  // freeing never waits for the device.
  void Free(void* ptr);

  // (never while recorded or running commands may use it: see Free)
  void Destroy(Buffer* b);

  // Workspaces (a kernel function's temporary buffers, allocated and freed at every call): kept and
  // reused by size, smallest fit first. Reuse inside one command buffer is safe: every dispatch is
  // followed by a full compute barrier.
  void* AllocWorkspace(size_t nbytes);
  void FreeWorkspace(void* ptr);
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

  int MemoryType(uint32_t bits, VkMemoryPropertyFlags flags) const;

  void Init();
};

}  // namespace vulkan
}  // namespace tvmgen
