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
    std::string scope = mem_scope.has_value() ? std::string(mem_scope.value()) : std::string();
    bool host_visible = scope == "global.host";
    if (IsTextureScope(scope)) return AllocImage(dev, TextureShape(scope, ndim, shape, dtype), dtype, scope);
    if (!scope.empty() && scope != "global" && !host_visible) {
      TVM_FFI_THROW(RuntimeError) << "tvmgen's OpenCL runtime supports the memory scopes global, global.host and "
                                  << "global.texture*, not \"" << scope << "\"";
    }
    size_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
    size_t nbytes = n * ((dtype.bits * dtype.lanes + 7) / 8);
    return AllocBuffer(dev, nbytes, host_visible);
  }

  // A 2-d image array (RGBA, float32 or float16 channels) for a texture-scoped tensor.
  void* AllocImage(DLDevice dev, const ImageInfo& info, DLDataType dtype, const std::string& scope) {
    Workspace& w = Workspace::Global();
    const DeviceInfo& d = w.device(dev.device_id);
    const Api& api = cl::Get();
    if (!api.CreateImage) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL texture memory: " << LoadedPath() << " lacks clCreateImage (OpenCL 1.2): "
                                  << "compile with --gpu-family generic";
    }
    if (!d.image_support) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL device " << d.name << " (driver " << d.driver << ") has no image "
                                  << "support, which this model's texture memory (" << scope << ", --gpu-family adreno) "
                                  << "needs: compile with --gpu-family generic";
    }
    if (info.width > d.image2d_max_width || info.height > d.image2d_max_height || info.depth > d.image_max_array) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL texture memory: a " << info.width << "x" << info.height << "x"
                                  << info.depth << " image (" << scope << ") exceeds device " << d.name
                                  << "'s limits (" << d.image2d_max_width << "x" << d.image2d_max_height << ", "
                                  << d.image_max_array << " layers): compile with --gpu-family generic";
    }
    cl_image_format format{CL_RGBA, dtype.bits == 16 ? CL_HALF_FLOAT : CL_FLOAT};
    cl_image_desc desc{};
    desc.image_type = CL_MEM_OBJECT_IMAGE2D_ARRAY;
    desc.image_width = info.width;
    desc.image_height = info.height;
    desc.image_array_size = info.depth;
    cl_int err = CL_SUCCESS;
    cl_mem m = api.CreateImage(w.context(), CL_MEM_READ_WRITE, &format, &desc, nullptr, &err);
    if (err != CL_SUCCESS || m == nullptr) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL: creating a " << info.width << "x" << info.height << "x" << info.depth
                                  << " RGBA " << (dtype.bits == 16 ? "half" : "float") << " image (" << scope
                                  << ") on " << d.name << " failed: " << ErrorName(err);
    }
    std::lock_guard<std::mutex> lock(w.mem_mu);
    w.sizes[m] = info.bytes();
    w.images[m] = info;
    return m;
  }

  void FreeDataSpace(DLDevice dev, void* ptr) final {
    if (ptr == nullptr) return;
    Workspace& w = Workspace::Global();
    {
      std::lock_guard<std::mutex> lock(w.mem_mu);
      w.sizes.erase(ptr);
      w.host_visible.erase(ptr);
      w.images.erase(ptr);
    }
    // Kernels using the buffer may still be queued: OpenCL keeps it alive until they finish.
    cl::Get().ReleaseMemObject(static_cast<cl_mem>(ptr));
  }

  size_t GetDataSize(const DLTensor& arr, ffi::Optional<ffi::String> mem_scope) final {
    std::string scope = mem_scope.has_value() ? std::string(mem_scope.value()) : std::string();
    if (IsTextureScope(scope)) return TextureShape(scope, arr.ndim, arr.shape, arr.dtype).bytes();
    if (!scope.empty() && scope != "global" && scope != "global.host") {
      TVM_FFI_THROW(RuntimeError) << "tvmgen's OpenCL runtime does not support the memory scope \"" << scope << "\"";
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

  // Copies where one side (or both) is an image: the whole image, from or to compact bytes.
  void CopyImage(const void* from, size_t from_offset, const ImageInfo* from_img, void* to, size_t to_offset,
                 const ImageInfo* to_img, size_t nbytes, DLDevice dev_from, DLDevice dev_to, bool from_cl, bool to_cl,
                 TVMStreamHandle stream) {
    const Api& api = cl::Get();
    Workspace& w = Workspace::Global();
    const ImageInfo& img = from_img ? *from_img : *to_img;
    if ((from_img && from_offset != 0) || (to_img && to_offset != 0) || nbytes != img.bytes() ||
        (from_img && to_img && from_img->bytes() != to_img->bytes())) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL texture copy: images are copied whole (" << img.bytes() << " bytes), not "
                                  << nbytes << " bytes at offsets " << from_offset << " / " << to_offset;
    }
    if (!api.EnqueueReadImage || !api.EnqueueWriteImage || !api.EnqueueCopyImage || !api.EnqueueCopyImageToBuffer ||
        !api.EnqueueCopyBufferToImage) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL texture copy: " << LoadedPath() << " lacks the OpenCL 1.2 image copies";
    }
    const size_t origin[3] = {0, 0, 0};
    const size_t region[3] = {img.width, img.height, img.depth};
    const size_t row = img.width * img.pixel_bytes, slice = row * img.height;
    cl_command_queue q = w.Queue(from_cl ? dev_from.device_id : dev_to.device_id, stream);
    cl_mem src = static_cast<cl_mem>(const_cast<void*>(from)), dst = static_cast<cl_mem>(to);
    if (from_img && to_img) {
      if (from_img->width != to_img->width || from_img->height != to_img->height || from_img->depth != to_img->depth) {
        // same bytes, other image shape (another texture scope): through a buffer
        cl_int err = CL_SUCCESS;
        cl_mem tmp = api.CreateBuffer(w.context(), CL_MEM_READ_WRITE, nbytes, nullptr, &err);
        TVMGEN_CL_CHECK(err, "clCreateBuffer (image to image copy)");
        const size_t to_region[3] = {to_img->width, to_img->height, to_img->depth};
        cl_int e1 = api.EnqueueCopyImageToBuffer(q, src, tmp, origin, region, 0, 0, nullptr, nullptr);
        cl_int e2 = e1 == CL_SUCCESS ? api.EnqueueCopyBufferToImage(q, tmp, dst, 0, origin, to_region, 0, nullptr, nullptr) : e1;
        cl_int e3 = api.Finish(q);
        api.ReleaseMemObject(tmp);
        TVMGEN_CL_CHECK(e1 != CL_SUCCESS ? e1 : e2 != CL_SUCCESS ? e2 : e3, "image to image copy");
      } else {
        TVMGEN_CL_CHECK(api.EnqueueCopyImage(q, src, dst, origin, origin, region, 0, nullptr, nullptr), "clEnqueueCopyImage");
      }
    } else if (from_img && to_cl) {
      TVMGEN_CL_CHECK(api.EnqueueCopyImageToBuffer(q, src, dst, origin, region, to_offset, 0, nullptr, nullptr),
                      "clEnqueueCopyImageToBuffer");
    } else if (to_img && from_cl) {
      TVMGEN_CL_CHECK(api.EnqueueCopyBufferToImage(q, src, dst, from_offset, origin, region, 0, nullptr, nullptr),
                      "clEnqueueCopyBufferToImage");
    } else if (from_img) {
      TVMGEN_CL_CHECK(api.EnqueueReadImage(q, src, CL_TRUE, origin, region, row, slice, static_cast<char*>(to) + to_offset,
                                           0, nullptr, nullptr), "clEnqueueReadImage (device to host)");
    } else {
      TVMGEN_CL_CHECK(api.EnqueueWriteImage(q, dst, CL_TRUE, origin, region, row, slice,
                                            static_cast<const char*>(from) + from_offset, 0, nullptr, nullptr),
                      "clEnqueueWriteImage (host to device)");
    }
    if (from_cl && to_cl && dev_from.device_id != dev_to.device_id) TVMGEN_CL_CHECK(api.Finish(q), "clFinish");
  }

  void Copy(const void* from, size_t from_offset, void* to, size_t to_offset, size_t nbytes, DLDevice dev_from,
            DLDevice dev_to, TVMStreamHandle stream) {
    if (nbytes == 0) return;
    const Api& api = cl::Get();
    Workspace& w = Workspace::Global();
    bool from_cl = dev_from.device_type == kDLOpenCL, to_cl = dev_to.device_type == kDLOpenCL;
    bool from_host = dev_from.device_type == kDLCPU || dev_from.device_type == kDLCUDAHost;
    bool to_host = dev_to.device_type == kDLCPU || dev_to.device_type == kDLCUDAHost;
    ImageInfo from_img, to_img;
    bool from_image = from_cl && w.FindImage(from, &from_img);
    bool to_image = to_cl && w.FindImage(to, &to_img);
    if (from_image || to_image) {
      CopyImage(from, from_offset, from_image ? &from_img : nullptr, to, to_offset, to_image ? &to_img : nullptr,
                nbytes, dev_from, dev_to, from_cl, to_cl, stream);
      return;
    }
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
