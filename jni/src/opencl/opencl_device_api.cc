// The kDLOpenCL DeviceAPI (memory, copies, streams, attributes), registered as device_api.opencl.
//
// Device memory: DLTensor::data is the cl_mem itself. It is only ever handed to the OpenCL API
// (clEnqueueRead/Write/CopyBuffer, clSetKernelArg), never dereferenced on the host.
#include "opencl_common.h"

namespace tvmgen {
namespace opencl {

thread_local int current_device = 0;

class OpenCLDeviceAPI final : public DeviceAPI {
 public:
  static OpenCLDeviceAPI* Global() {
    static OpenCLDeviceAPI* api = new OpenCLDeviceAPI();  // TVM keeps the pointer forever
    return api;
  }

  void SetDevice(DLDevice dev) final { current_device = dev.device_id; }

  void GetAttr(DLDevice dev, DeviceAttrKind kind, ffi::Any* rv) final {
    Workspace& w = Workspace::Global();
    if (kind == tvm::runtime::kExist) {
      *rv = static_cast<int64_t>(w.TryInit() && dev.device_id >= 0 &&
                                 dev.device_id < static_cast<int>(w.num_devices()));
      return;
    }
    if (!w.TryInit() || dev.device_id < 0 || dev.device_id >= static_cast<int>(w.num_devices())) return;
    const DeviceInfo& d = w.device(dev.device_id);
    switch (kind) {
      case tvm::runtime::kMaxThreadsPerBlock: *rv = static_cast<int64_t>(d.max_work_group); break;
      case tvm::runtime::kWarpSize: *rv = static_cast<int64_t>(1); break;  // no warp in OpenCL
      case tvm::runtime::kMaxSharedMemoryPerBlock: *rv = static_cast<int64_t>(d.local_mem); break;
      case tvm::runtime::kComputeVersion: *rv = ffi::String(d.version); break;
      case tvm::runtime::kDeviceName: *rv = ffi::String(d.name); break;
      case tvm::runtime::kMaxClockRate: *rv = static_cast<int64_t>(d.clock_mhz) * 1000; break;  // kHz, as TVM
      case tvm::runtime::kMultiProcessorCount: *rv = static_cast<int64_t>(d.compute_units); break;
      case tvm::runtime::kMaxThreadDimensions: {
        std::ostringstream o;
        o << "[";
        for (size_t i = 0; i < d.max_work_items.size() && i < 3; ++i) o << (i ? ", " : "") << d.max_work_items[i];
        o << "]";
        *rv = ffi::String(o.str());
        break;
      }
      case tvm::runtime::kDriverVersion: *rv = ffi::String(d.driver); break;
      case tvm::runtime::kApiVersion: *rv = ffi::String(d.platform_version); break;
      case tvm::runtime::kTotalGlobalMemory: *rv = static_cast<int64_t>(d.global_mem); break;
      default: break;  // unknown: None
    }
  }

  void* AllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) final {
    return AllocBuffer(dev, nbytes, false);
  }

  // host_visible: CL_MEM_ALLOC_HOST_PTR (memory scope "global.host"), recorded in w.host_visible.
  void* AllocBuffer(DLDevice dev, size_t nbytes, bool host_visible) {
    Workspace& w = Workspace::Global();
    w.device(dev.device_id);  // initialises, checks the id
    cl_int err = CL_SUCCESS;
    cl_mem_flags flags = CL_MEM_READ_WRITE | (host_visible ? CL_MEM_ALLOC_HOST_PTR : 0);
    // A zero-size buffer is invalid in OpenCL: give it one byte.
    cl_mem m = cl::Get().CreateBuffer(w.context(), flags, nbytes ? nbytes : 1, nullptr, &err);
    if (err != CL_SUCCESS || m == nullptr) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL: allocating " << nbytes << " bytes on "
                                  << w.device(dev.device_id).name << " failed: " << ErrorName(err);
    }
    std::lock_guard<std::mutex> lock(w.mem_mu);
    w.sizes[m] = nbytes;
    if (host_visible) w.host_visible.insert(m);
    return m;
  }

  void* AllocDataSpace(DLDevice dev, int ndim, const int64_t* shape, DLDataType dtype,
                       ffi::Optional<ffi::String> mem_scope) final {
    bool host_visible = mem_scope.has_value() && mem_scope.value() == "global.host";
    if (mem_scope.has_value() && !mem_scope.value().empty() && mem_scope.value() != "global" && !host_visible) {
      TVM_FFI_THROW(RuntimeError) << "tvmgen's OpenCL runtime supports buffer memory only, not the memory scope \""
                                  << mem_scope.value() << "\" (texture memory, used by --gpu-family adreno): "
                                  << "compile with --gpu-family generic";
    }
    size_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
    size_t nbytes = n * ((dtype.bits * dtype.lanes + 7) / 8);
    return AllocBuffer(dev, nbytes, host_visible);
  }

  void FreeDataSpace(DLDevice dev, void* ptr) final {
    if (ptr == nullptr) return;
    Workspace& w = Workspace::Global();
    {
      std::lock_guard<std::mutex> lock(w.mem_mu);
      w.sizes.erase(ptr);
      w.host_visible.erase(ptr);
    }
    // Kernels using the buffer may still be queued: OpenCL keeps it alive until they finish.
    cl::Get().ReleaseMemObject(static_cast<cl_mem>(ptr));
  }

  size_t GetDataSize(const DLTensor& arr, ffi::Optional<ffi::String> mem_scope) final {
    if (mem_scope.has_value() && !mem_scope.value().empty() && mem_scope.value() != "global" &&
        mem_scope.value() != "global.host") {
      TVM_FFI_THROW(RuntimeError) << "tvmgen's OpenCL runtime does not support the memory scope \""
                                  << mem_scope.value() << "\" (compile with --gpu-family generic)";
    }
    size_t n = 1;
    for (int i = 0; i < arr.ndim; ++i) n *= static_cast<size_t>(arr.shape[i]);
    return n * ((arr.dtype.bits * arr.dtype.lanes + 7) / 8);
  }

  void CopyDataFromTo(DLTensor* from, DLTensor* to, TVMStreamHandle stream) final {
    size_t nbytes = GetDataSize(*from, std::nullopt);
    if (nbytes != GetDataSize(*to, std::nullopt)) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL copy: the source holds " << nbytes << " bytes, the target "
                                  << GetDataSize(*to, std::nullopt);
    }
    if (!Compact(*from) || !Compact(*to)) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL copy: only compact (contiguous) tensors can be copied";
    }
    Copy(from->data, from->byte_offset, to->data, to->byte_offset, nbytes, from->device, to->device, stream);
  }

  void StreamSync(DLDevice dev, TVMStreamHandle stream) final {
    TVMGEN_CL_CHECK(cl::Get().Finish(Workspace::Global().Queue(dev.device_id, stream)), "clFinish");
  }

  TVMStreamHandle CreateStream(DLDevice dev) final {
    Workspace& w = Workspace::Global();
    cl_int err = CL_SUCCESS;
    // In profiling mode its kernels record events too: the stream needs the same property.
    cl_command_queue q =
        cl::Get().CreateCommandQueue(w.context(), w.device(dev.device_id).id, w.queue_properties(), &err);
    TVMGEN_CL_CHECK(err, "clCreateCommandQueue");
    w.NoteStream(q, true);
    return q;
  }

  void FreeStream(DLDevice dev, TVMStreamHandle stream) final {
    if (stream == nullptr) return;
    Workspace::Global().NoteStream(stream, false);
    cl::Get().ReleaseCommandQueue(static_cast<cl_command_queue>(stream));
  }

  void SyncStreamFromTo(DLDevice dev, TVMStreamHandle src, TVMStreamHandle dst) final {
    StreamSync(dev, src);  // in-order queues: finishing the source orders everything after it
  }

  // Workspaces (temporary buffers of host-side kernels): reused by size, smallest fit first.
  void* AllocWorkspace(DLDevice dev, size_t nbytes, DLDataType type_hint) final {
    Workspace& w = Workspace::Global();
    {
      std::lock_guard<std::mutex> lock(w.mem_mu);
      auto it = w.free_workspace.lower_bound(nbytes);
      if (it != w.free_workspace.end() && it->first <= nbytes * 2 + 4096) {
        void* p = it->second;
        w.free_workspace.erase(it);
        return p;
      }
    }
    return AllocDataSpace(dev, nbytes, tvm::runtime::kTempAllocaAlignment, type_hint);
  }

  void FreeWorkspace(DLDevice dev, void* ptr) final {
    if (ptr == nullptr) return;
    Workspace& w = Workspace::Global();
    std::lock_guard<std::mutex> lock(w.mem_mu);
    auto it = w.sizes.find(ptr);
    if (it == w.sizes.end()) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL: FreeWorkspace of a pointer this runtime did not allocate";
    }
    w.free_workspace.emplace(it->second, ptr);
  }

  bool SupportsDevicePointerArithmeticsOnHost() final { return false; }

 protected:
  void CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t nbytes,
                      DLDevice dev_from, DLDevice dev_to, DLDataType type_hint, TVMStreamHandle stream) final {
    Copy(from, from_offset, to, to_offset, nbytes, dev_from, dev_to, stream);
  }

 private:
  // A "global.host" buffer that can be mapped (the library has clEnqueueMapBuffer / Unmap).
  static bool Mapped(const void* mem) {
    const Api& api = cl::Get();
    if (api.EnqueueMapBuffer == nullptr || api.EnqueueUnmapMemObject == nullptr) return false;
    Workspace& w = Workspace::Global();
    std::lock_guard<std::mutex> lock(w.mem_mu);
    return w.host_visible.count(const_cast<void*>(mem)) != 0;
  }

  static bool Compact(const DLTensor& t) {
    if (t.strides == nullptr) return true;
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect) return false;
      expect *= t.shape[i];
    }
    return true;
  }

  void Copy(const void* from, size_t from_offset, void* to, size_t to_offset, size_t nbytes, DLDevice dev_from,
            DLDevice dev_to, TVMStreamHandle stream) {
    if (nbytes == 0) return;
    const Api& api = cl::Get();
    Workspace& w = Workspace::Global();
    bool from_cl = dev_from.device_type == kDLOpenCL, to_cl = dev_to.device_type == kDLOpenCL;
    bool from_host = dev_from.device_type == kDLCPU || dev_from.device_type == kDLCUDAHost;
    bool to_host = dev_to.device_type == kDLCPU || dev_to.device_type == kDLCUDAHost;
    if (from_cl && to_cl) {
      cl_command_queue q = w.Queue(dev_from.device_id, stream);
      TVMGEN_CL_CHECK(api.EnqueueCopyBuffer(q, static_cast<cl_mem>(const_cast<void*>(from)), static_cast<cl_mem>(to),
                                            from_offset, to_offset, nbytes, 0, nullptr, nullptr),
                      "clEnqueueCopyBuffer");
      if (dev_from.device_id != dev_to.device_id) TVMGEN_CL_CHECK(api.Finish(q), "clFinish");
    } else if (from_cl && to_host && Mapped(from)) {
      cl_command_queue q = w.Queue(dev_from.device_id, stream);
      cl_mem m = static_cast<cl_mem>(const_cast<void*>(from));
      cl_int err = CL_SUCCESS;
      void* p = api.EnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ, from_offset, nbytes, 0, nullptr, nullptr, &err);
      TVMGEN_CL_CHECK(err, "clEnqueueMapBuffer (host-visible buffer to host)");
      std::memcpy(static_cast<char*>(to) + to_offset, p, nbytes);
      TVMGEN_CL_CHECK(api.EnqueueUnmapMemObject(q, m, p, 0, nullptr, nullptr), "clEnqueueUnmapMemObject");
    } else if (from_host && to_cl && Mapped(to)) {
      cl_command_queue q = w.Queue(dev_to.device_id, stream);
      cl_mem m = static_cast<cl_mem>(to);
      cl_int err = CL_SUCCESS;
      // Blocking map: waits for the kernels queued before it (in-order queue) that use the buffer.
      void* p = api.EnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_WRITE, to_offset, nbytes, 0, nullptr, nullptr, &err);
      TVMGEN_CL_CHECK(err, "clEnqueueMapBuffer (host to host-visible buffer)");
      std::memcpy(p, static_cast<const char*>(from) + from_offset, nbytes);
      // The unmap is queued before any later kernel on this queue: they see the new bytes.
      TVMGEN_CL_CHECK(api.EnqueueUnmapMemObject(q, m, p, 0, nullptr, nullptr), "clEnqueueUnmapMemObject");
    } else if (from_cl && to_host) {
      cl_command_queue q = w.Queue(dev_from.device_id, stream);
      TVMGEN_CL_CHECK(api.EnqueueReadBuffer(q, static_cast<cl_mem>(const_cast<void*>(from)), CL_TRUE, from_offset,
                                            nbytes, static_cast<char*>(to) + to_offset, 0, nullptr, nullptr),
                      "clEnqueueReadBuffer (device to host)");
    } else if (from_host && to_cl) {
      cl_command_queue q = w.Queue(dev_to.device_id, stream);
      TVMGEN_CL_CHECK(api.EnqueueWriteBuffer(q, static_cast<cl_mem>(to), CL_TRUE, to_offset, nbytes,
                                             static_cast<const char*>(from) + from_offset, 0, nullptr, nullptr),
                      "clEnqueueWriteBuffer (host to device)");
    } else {
      TVM_FFI_THROW(RuntimeError) << "OpenCL: cannot copy from device type " << dev_from.device_type
                                  << " to device type " << dev_to.device_type;
    }
  }
};

DeviceAPI* GlobalDeviceAPI() { return OpenCLDeviceAPI::Global(); }

}  // namespace opencl
}  // namespace tvmgen
