// The OpenCL memory allocator of the Relax VM ("DeviceAllocator.opencl"), for texture memory.
//
// The VM plans memory as flat storage (a buffer) and makes each tensor a view of one:
// Allocator::CreateView(buffer, shape, dtype, scope). TVM's default view is the buffer itself,
// which is right for buffer scopes but not for the "global.texture*" scopes of the Adreno
// schedules, whose kernels take image2d_array_t arguments. This allocator gives such a view its own
// image (OpenCL cannot make an image array over a buffer), created on first use and kept with its
// storage buffer: the next run that gets the same buffer from the pool finds the image again, so a
// steady run creates no OpenCL objects. Buffers are pooled by size (kPooled) or freed (kNaive).
//
// TVM's tvm/runtime/memory/memory_manager.h cannot be compiled from the wheel's headers (it needs
// tvm/support/io.h, which the wheel lacks), so the Allocator base class is declared below with
// the layout of TVM 0.27's: the same virtual functions in the same order and signatures. Every virtual
// is overridden here; the base's vtable and type info come from libtvm_runtime.
#include "opencl_common.h"

#include <tvm/ffi/container/shape.h>

namespace tvm {
namespace runtime {
namespace memory {

enum AllocatorType {
  kNaive = 1,
  kPooled,
};

struct Buffer {
  void* data{nullptr};
  size_t size{0};
  DLDevice device;
  AllocatorType alloc_type;
};

class Allocator {  // tvm/runtime/memory/memory_manager.h, TVM 0.27
 public:
  explicit Allocator(AllocatorType type) : type_(type) {}
  virtual ~Allocator() = default;
  inline AllocatorType type() const { return type_; }
  virtual Buffer Alloc(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) = 0;
  virtual Buffer Alloc(DLDevice dev, ffi::Shape shape, DLDataType type_hint, const std::string& mem_scope = "");
  virtual void* CreateView(const Buffer& buffer, ffi::Shape shape, DLDataType type_hint,
                           const std::string& mem_scope = "global") {
    return buffer.data;
  }
  virtual void FreeView(DLDevice dev, void* data) {}
  virtual void Free(const Buffer& buffer) = 0;
  virtual void Clear();
  virtual size_t UsedMemory() const = 0;

 protected:
  virtual bool AllowMemoryScope(const std::string& mem_scope) const;

 private:
  AllocatorType type_;
};

}  // namespace memory
}  // namespace runtime
}  // namespace tvm

namespace tvmgen {
namespace opencl {
namespace {

using tvm::runtime::memory::AllocatorType;
using tvm::runtime::memory::Buffer;

class OpenCLAllocator final : public tvm::runtime::memory::Allocator {
 public:
  explicit OpenCLAllocator(AllocatorType type) : Allocator(type) {}

  Buffer Alloc(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) final {
    size_t size = type() == tvm::runtime::memory::kPooled ? RoundUp(nbytes) : nbytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pool_.find({dev.device_id, size});
      if (it != pool_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return Make(p, size, dev);
      }
    }
    void* p = GlobalDeviceAPI()->AllocDataSpace(dev, size, alignment, type_hint);
    used_ += size;
    return Make(p, size, dev);
  }

  Buffer Alloc(DLDevice dev, tvm::ffi::Shape shape, DLDataType type_hint, const std::string& mem_scope) final {
    if (!IsTextureScope(mem_scope)) {
      size_t n = (type_hint.bits * type_hint.lanes + 7) / 8;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      return Alloc(dev, n, 64, type_hint);
    }
    ImageInfo info = TextureShape(mem_scope, static_cast<int>(shape.size()), shape.data(), type_hint);
    void* p = GlobalDeviceAPI()->AllocDataSpace(dev, static_cast<int>(shape.size()), shape.data(), type_hint,
                                               ffi::String(mem_scope));
    used_ += info.bytes();
    Buffer b = Make(p, info.bytes(), dev);
    std::lock_guard<std::mutex> lock(mu_);
    own_images_.insert(p);
    return b;
  }

  void* CreateView(const Buffer& buffer, tvm::ffi::Shape shape, DLDataType type_hint,
                   const std::string& mem_scope) final {
    if (!IsTextureScope(mem_scope)) return buffer.data;
    ImageInfo info = TextureShape(mem_scope, static_cast<int>(shape.size()), shape.data(), type_hint);
    ImageInfo own;
    if (Workspace::Global().FindImage(buffer.data, &own) && own.width == info.width && own.height == info.height &&
        own.depth == info.depth && own.pixel_bytes == info.pixel_bytes) {
      return buffer.data;  // storage allocated as this very image
    }
    if (info.bytes() > buffer.size) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL texture view of " << info.bytes() << " bytes on storage of "
                                  << buffer.size;
    }
    std::string key = std::to_string(info.width) + "x" + std::to_string(info.height) + "x" +
                      std::to_string(info.depth) + "/" + std::to_string(info.pixel_bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto& views = views_[buffer.data];
    auto it = views.find(key);
    if (it != views.end()) return it->second;
    void* image = GlobalDeviceAPI()->AllocDataSpace(buffer.device, static_cast<int>(shape.size()), shape.data(),
                                                    type_hint, ffi::String(mem_scope));
    views.emplace(key, image);
    return image;
  }

  void FreeView(DLDevice dev, void* data) final {}  // kept with the storage buffer (see above)

  void Free(const Buffer& buffer) final {
    std::unique_lock<std::mutex> lock(mu_);
    if (own_images_.erase(buffer.data)) {
      lock.unlock();
      used_ -= buffer.size;
      GlobalDeviceAPI()->FreeDataSpace(buffer.device, buffer.data);
      return;
    }
    if (type() == tvm::runtime::memory::kPooled) {
      pool_[{buffer.device.device_id, buffer.size}].push_back(buffer.data);
      return;
    }
    std::vector<void*> images = TakeViews(buffer.data);
    lock.unlock();
    for (void* image : images) GlobalDeviceAPI()->FreeDataSpace(buffer.device, image);
    used_ -= buffer.size;
    GlobalDeviceAPI()->FreeDataSpace(buffer.device, buffer.data);
  }

  void Clear() final {
    std::vector<std::pair<DLDevice, void*>> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, buffers] : pool_) {
        DLDevice dev{kDLOpenCL, key.first};
        for (void* b : buffers) {
          for (void* image : TakeViews(b)) release.emplace_back(dev, image);
          release.emplace_back(dev, b);
          used_ -= key.second;
        }
      }
      pool_.clear();
    }
    for (auto& [dev, p] : release) GlobalDeviceAPI()->FreeDataSpace(dev, p);
  }

  size_t UsedMemory() const final { return used_.load(); }

 protected:
  bool AllowMemoryScope(const std::string& mem_scope) const final {
    return mem_scope.empty() || mem_scope == "global" || IsTextureScope(mem_scope);
  }

 private:
  static size_t RoundUp(size_t n) { return (n + 4095) / 4096 * 4096; }

  Buffer Make(void* p, size_t size, DLDevice dev) const {
    Buffer b;
    b.data = p;
    b.size = size;
    b.device = dev;
    b.alloc_type = type();
    return b;
  }

  std::vector<void*> TakeViews(void* buffer) {  // with mu_ held
    std::vector<void*> out;
    auto it = views_.find(buffer);
    if (it == views_.end()) return out;
    for (auto& kv : it->second) out.push_back(kv.second);
    views_.erase(it);
    return out;
  }

  std::mutex mu_;
  std::atomic<size_t> used_{0};
  std::map<std::pair<int, size_t>, std::vector<void*>> pool_;
  std::unordered_map<void*, std::map<std::string, void*>> views_;  // storage buffer -> its images
  std::unordered_set<void*> own_images_;
};

void* DeviceAllocator(DLDevice dev, int type) {
  // One allocator per (device, kind); TVM's memory manager keeps the pointer for the process.
  static std::mutex mu;
  static std::map<std::pair<int, int>, OpenCLAllocator*> allocators;
  std::lock_guard<std::mutex> lock(mu);
  OpenCLAllocator*& a = allocators[{dev.device_id, type}];
  if (a == nullptr) a = new OpenCLAllocator(static_cast<AllocatorType>(type));
  return a;
}

struct RegisterAllocator {
  RegisterAllocator() {
    ffi::Function::SetGlobal("DeviceAllocator.opencl", ffi::Function::FromTyped(DeviceAllocator), true);
  }
} register_allocator;

}  // namespace
}  // namespace opencl
}  // namespace tvmgen
