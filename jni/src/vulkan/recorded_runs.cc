// Recorded runs (workspace.h, "recorded runs"): a steady run's command buffer kept and submitted again.
#include "workspace.h"

#include <cstdio>

namespace tvmgen {
namespace vulkan {

void Workspace::NoteAccess(const std::vector<const Buffer*>& reads, const std::vector<const Buffer*>& writes) {
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

void Workspace::DropCaptures(const Buffer* b, std::vector<Buffer*> Capture::*list) {
  for (auto& [id, c] : captures) {
    const std::vector<Buffer*>& v = c.*list;
    if (c.valid && &c != capturing && std::find(v.begin(), v.end(), b) != v.end()) {
      Release(c);
      counts.invalidated++;
    }
  }
}

void Workspace::Hold(int64_t owner, const ffi::Array<int64_t>& ptrs) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  for (auto it = held.begin(); it != held.end();) it = it->second == owner ? held.erase(it) : std::next(it);
  for (int64_t p : ptrs) {
    auto b = buffers.find(reinterpret_cast<const void*>(p));
    if (b != buffers.end()) held[b->second] = owner;
  }
}

void Workspace::Release(Capture& c) {
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

void Workspace::InvalidateCaptures(const Buffer* b) {
  DropCaptures(b, &Capture::uses);
  if (capturing != nullptr && std::find(capturing->uses.begin(), capturing->uses.end(), b) != capturing->uses.end()) {
    FailCapture("a buffer its commands use was freed");
  }
}

void Workspace::FailCapture(const std::string& why) {
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

bool Workspace::CaptureBegin() {
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

int64_t Workspace::CaptureEnd() {
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

bool Workspace::Replay(int64_t id, int64_t owner) {
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

void Workspace::ReleaseCapture(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  auto it = captures.find(id);
  if (it == captures.end() || &it->second == capturing) return;
  if (it->second.valid) Release(it->second);
  captures.erase(it);
}

}  // namespace vulkan
}  // namespace tvmgen
