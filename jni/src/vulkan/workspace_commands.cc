// The Vulkan workspace's command buffers (recording, submission, the wait for results), barriers,
// descriptor sets and timestamp queries (workspace.h).
#include "workspace.h"

namespace tvmgen {
namespace vulkan {

bool Workspace::SetProfiling(bool on) {
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

std::map<std::string, std::pair<int64_t, int64_t>> Workspace::TakeKernelTimes() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Flush();
  auto out = std::move(kernel_times);
  kernel_times.clear();
  return out;
}

void Workspace::BeginRecording(VkCommandBufferUsageFlags flags) {
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

void Workspace::Submit() {
  if (!recording) return;
  if (capturing != nullptr) FailCapture("the run needed the device's results before its end (a copy to the host or a sync)");
  recording = false;
  TVMGEN_VK_CHECK(api.EndCommandBuffer(cmd), "vkEndCommandBuffer");
  SubmitBuffer(cmd, /*keep=*/false);
  cmd = VK_NULL_HANDLE;
}

void Workspace::SubmitBuffer(VkCommandBuffer c, bool keep) {
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

void Workspace::Dispatched() {
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

void Workspace::Flush() {
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

void Workspace::Barrier(bool compute_only) {
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

void Workspace::BarrierFor(const std::vector<const Buffer*>& reads, const std::vector<const Buffer*>& writes,
                           bool copy) {
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

VkDescriptorSet Workspace::DescriptorSet(VkDescriptorSetLayout layout, const std::vector<Buffer*>& bufs) {
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

VkDescriptorSet Workspace::AllocateSet(VkDescriptorSetLayout layout) {
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

}  // namespace vulkan
}  // namespace tvmgen
