// tvm::runtime::DeviceAPI, the class a device backend implements for the TVM 0.27 runtime.
//
// The apache-tvm wheel (host) and the TVM source tree (Android build) ship TVM's own
// tvm/runtime/device_api.h, which is used when found. The unpacked aarch64 wheel used for
// linux-aarch64 holds only the libraries, so this file also declares the class itself, with the
// same virtual functions in the same order and with the same signatures (the vtable layout and the
// mangled names of the base implementations in libtvm_runtime must match TVM 0.27's exactly).
// Checked by building the host library both ways and comparing the class layout
// (g++ -fdump-lang-class) and the symbols it imports; see jni/src/opencl/README.md.
#ifndef TVMGEN_OPENCL_DEVICE_API_H_
#define TVMGEN_OPENCL_DEVICE_API_H_

#if !defined(TVMGEN_OPENCL_OWN_DEVICE_API) && defined(__has_include)
#if __has_include(<tvm/runtime/device_api.h>)
#include <tvm/runtime/device_api.h>
#define TVMGEN_OPENCL_TVM_DEVICE_API_HEADER 1
#endif
#endif

#ifndef TVMGEN_OPENCL_TVM_DEVICE_API_HEADER
#include <tvm/ffi/any.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/string.h>

#include <string>

typedef void* TVMStreamHandle;

namespace tvm {
using Device = DLDevice;
namespace runtime {

enum DeviceAttrKind : int {
  kExist = 0,
  kMaxThreadsPerBlock = 1,
  kWarpSize = 2,
  kMaxSharedMemoryPerBlock = 3,
  kComputeVersion = 4,
  kDeviceName = 5,
  kMaxClockRate = 6,
  kMultiProcessorCount = 7,
  kMaxThreadDimensions = 8,
  kMaxRegistersPerBlock = 9,
  kGcnArch = 10,
  kApiVersion = 11,
  kDriverVersion = 12,
  kL2CacheSizeBytes = 13,
  kTotalGlobalMemory = 14,
  kAvailableGlobalMemory = 15,
  kImagePitchAlignment = 16,
};

constexpr int kAllocAlignment = 64;
constexpr int kTempAllocaAlignment = 64;

// Declaration order = vtable order (Itanium C++ ABI). Non-pure members without a body here are
// defined in libtvm_runtime.so.
class __attribute__((visibility("default"))) DeviceAPI {
 public:
  virtual ~DeviceAPI() {}
  virtual void SetDevice(Device dev) = 0;
  virtual void GetAttr(Device dev, DeviceAttrKind kind, ffi::Any* rv) = 0;
  virtual size_t GetDataSize(const DLTensor& arr, ffi::Optional<ffi::String> mem_scope = std::nullopt);
  virtual void GetTargetProperty(Device dev, const std::string& property, ffi::Any* rv) {}
  virtual void* AllocDataSpace(Device dev, size_t nbytes, size_t alignment, DLDataType type_hint) = 0;
  virtual void* AllocDataSpace(Device dev, int ndim, const int64_t* shape, DLDataType dtype,
                               ffi::Optional<ffi::String> mem_scope = std::nullopt);
  virtual void FreeDataSpace(Device dev, void* ptr) = 0;
  virtual void CopyDataFromTo(DLTensor* from, DLTensor* to, TVMStreamHandle stream);
  virtual TVMStreamHandle CreateStream(Device dev);
  virtual void FreeStream(Device dev, TVMStreamHandle stream);
  virtual void StreamSync(Device dev, TVMStreamHandle stream) = 0;
  virtual void SetStream(Device dev, TVMStreamHandle stream);
  virtual TVMStreamHandle GetCurrentStream(Device dev);
  virtual void SyncStreamFromTo(Device dev, TVMStreamHandle event_src, TVMStreamHandle event_dst);
  virtual void* AllocWorkspace(Device dev, size_t nbytes, DLDataType type_hint = {});
  virtual void FreeWorkspace(Device dev, void* ptr);
  static DeviceAPI* Get(Device dev, bool allow_missing = false);
  virtual bool SupportsDevicePointerArithmeticsOnHost() { return false; }

 protected:
  virtual void CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t num_bytes,
                              Device dev_from, Device dev_to, DLDataType type_hint, TVMStreamHandle stream);
};

}  // namespace runtime
}  // namespace tvm

#ifndef TVM_VERSION
#define TVM_VERSION "0.27.0"
#endif
#endif  // !TVMGEN_OPENCL_TVM_DEVICE_API_HEADER

#endif  // TVMGEN_OPENCL_DEVICE_API_H_
