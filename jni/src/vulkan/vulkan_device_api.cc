// The kDLVulkan DeviceAPI (device_api.vulkan): buffers, copies between the host and the device, attributes.
#include <cstring>
#include <sstream>

#include "workspace.h"

namespace tvmgen {
namespace vulkan {

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

DeviceAPI* GlobalDeviceAPI() { return VulkanDeviceAPI::Global(); }

}  // namespace vulkan
}  // namespace tvmgen
