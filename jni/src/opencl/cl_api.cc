// Opens libOpenCL at run time (see cl_api.h).
#include "cl_api.h"

#include <dlfcn.h>
#include <tvm/ffi/error.h>

#include <cstdlib>
#include <mutex>

namespace tvmgen {
namespace cl {
namespace {

struct Loaded {
  Api api{};
  std::string path;
  std::string error;  // why loading failed (every path tried)
  bool ok = false;
};

template <typename F>
bool Resolve(void* handle, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr) {
    *missing += (missing->empty() ? "" : ", ") + std::string(name);
    return false;
  }
  return true;
}

bool ResolveAll(void* h, Api* a, std::string* missing) {
  bool ok = true;
  ok &= Resolve(h, "clGetPlatformIDs", &a->GetPlatformIDs, missing);
  ok &= Resolve(h, "clGetPlatformInfo", &a->GetPlatformInfo, missing);
  ok &= Resolve(h, "clGetDeviceIDs", &a->GetDeviceIDs, missing);
  ok &= Resolve(h, "clGetDeviceInfo", &a->GetDeviceInfo, missing);
  ok &= Resolve(h, "clCreateContext", &a->CreateContext, missing);
  ok &= Resolve(h, "clCreateCommandQueue", &a->CreateCommandQueue, missing);
  ok &= Resolve(h, "clReleaseCommandQueue", &a->ReleaseCommandQueue, missing);
  ok &= Resolve(h, "clCreateBuffer", &a->CreateBuffer, missing);
  ok &= Resolve(h, "clReleaseMemObject", &a->ReleaseMemObject, missing);
  ok &= Resolve(h, "clEnqueueReadBuffer", &a->EnqueueReadBuffer, missing);
  ok &= Resolve(h, "clEnqueueWriteBuffer", &a->EnqueueWriteBuffer, missing);
  ok &= Resolve(h, "clEnqueueCopyBuffer", &a->EnqueueCopyBuffer, missing);
  ok &= Resolve(h, "clFinish", &a->Finish, missing);
  ok &= Resolve(h, "clCreateProgramWithSource", &a->CreateProgramWithSource, missing);
  ok &= Resolve(h, "clCreateProgramWithBinary", &a->CreateProgramWithBinary, missing);
  ok &= Resolve(h, "clBuildProgram", &a->BuildProgram, missing);
  ok &= Resolve(h, "clGetProgramInfo", &a->GetProgramInfo, missing);
  ok &= Resolve(h, "clGetProgramBuildInfo", &a->GetProgramBuildInfo, missing);
  ok &= Resolve(h, "clReleaseProgram", &a->ReleaseProgram, missing);
  ok &= Resolve(h, "clCreateKernel", &a->CreateKernel, missing);
  ok &= Resolve(h, "clReleaseKernel", &a->ReleaseKernel, missing);
  ok &= Resolve(h, "clSetKernelArg", &a->SetKernelArg, missing);
  ok &= Resolve(h, "clEnqueueNDRangeKernel", &a->EnqueueNDRangeKernel, missing);
  // optional: without it a kernel's work-group is not checked before its first launch
  a->GetKernelWorkGroupInfo =
      reinterpret_cast<decltype(a->GetKernelWorkGroupInfo)>(dlsym(h, "clGetKernelWorkGroupInfo"));
  // optional: host-visible buffers fall back to clEnqueueRead/WriteBuffer without them
  a->EnqueueMapBuffer = reinterpret_cast<decltype(a->EnqueueMapBuffer)>(dlsym(h, "clEnqueueMapBuffer"));
  a->EnqueueUnmapMemObject =
      reinterpret_cast<decltype(a->EnqueueUnmapMemObject)>(dlsym(h, "clEnqueueUnmapMemObject"));
  // optional: only the profiling mode needs them (it says which one is missing)
  a->GetEventProfilingInfo =
      reinterpret_cast<decltype(a->GetEventProfilingInfo)>(dlsym(h, "clGetEventProfilingInfo"));
  a->WaitForEvents = reinterpret_cast<decltype(a->WaitForEvents)>(dlsym(h, "clWaitForEvents"));
  a->ReleaseEvent = reinterpret_cast<decltype(a->ReleaseEvent)>(dlsym(h, "clReleaseEvent"));
  // optional: only texture memory needs them (it says which one is missing)
  a->CreateImage = reinterpret_cast<decltype(a->CreateImage)>(dlsym(h, "clCreateImage"));
  a->EnqueueReadImage = reinterpret_cast<decltype(a->EnqueueReadImage)>(dlsym(h, "clEnqueueReadImage"));
  a->EnqueueWriteImage = reinterpret_cast<decltype(a->EnqueueWriteImage)>(dlsym(h, "clEnqueueWriteImage"));
  a->EnqueueCopyImage = reinterpret_cast<decltype(a->EnqueueCopyImage)>(dlsym(h, "clEnqueueCopyImage"));
  a->EnqueueCopyImageToBuffer =
      reinterpret_cast<decltype(a->EnqueueCopyImageToBuffer)>(dlsym(h, "clEnqueueCopyImageToBuffer"));
  a->EnqueueCopyBufferToImage =
      reinterpret_cast<decltype(a->EnqueueCopyBufferToImage)>(dlsym(h, "clEnqueueCopyBufferToImage"));
  return ok;
}

Loaded& State() {
  static Loaded* state = [] {
    auto* s = new Loaded();  // never freed: kernels may be released during static destruction
    std::string tried;
    for (const std::string& path : CandidatePaths()) {
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        const char* e = dlerror();
        tried += "\n  " + path + ": " + (e ? e : "not found");
        continue;
      }
      std::string missing;
      if (!ResolveAll(h, &s->api, &missing)) {
        tried += "\n  " + path + ": lacks " + missing;
        // A vendor's ICD (NVIDIA's libnvidia-opencl.so, for one) exports only the ICD entry points:
        // it is loaded through the ICD loader, not opened directly.
        if (dlsym(h, "clIcdGetPlatformIDsKHR") != nullptr) {
          tried += " (it is an OpenCL ICD, a vendor driver, not the ICD loader: set TVMGEN_OPENCL_LIBRARY to the "
                   "loader, libOpenCL.so.1, and register the driver with a file naming it in /etc/OpenCL/vendors/*.icd "
                   "or in a directory named by OCL_ICD_VENDORS)";
        }
        dlclose(h);
        continue;
      }
      s->path = path;
      s->ok = true;
      return s;
    }
    s->error = "no OpenCL library could be loaded; tried:" + tried +
               "\n(install the GPU vendor's OpenCL driver, or PoCL on Linux: apt-get install "
               "pocl-opencl-icd; set TVMGEN_OPENCL_LIBRARY=<path to libOpenCL.so> to name it)";
    return s;
  }();
  return *state;
}

}  // namespace

std::vector<std::string> CandidatePaths() {
  if (const char* env = std::getenv("TVMGEN_OPENCL_LIBRARY")) {
    if (*env) return {env};
  }
#if defined(__ANDROID__)
#if defined(__LP64__)
  return {"libOpenCL.so",
          "/system/vendor/lib64/libOpenCL.so",
          "/vendor/lib64/libOpenCL.so",
          "/system/lib64/libOpenCL.so",
          "/system/vendor/lib64/libOpenCL-pixel.so",  // Pixel (Mali/Tensor)
          "/vendor/lib64/egl/libGLES_mali.so",        // Mali drivers export CL from the GLES library
          "/system/vendor/lib64/egl/libGLES_mali.so",
          "/vendor/lib64/libPVROCL.so",               // PowerVR
          "/system/vendor/lib64/libPVROCL.so"};
#else
  return {"libOpenCL.so",
          "/system/vendor/lib/libOpenCL.so",
          "/vendor/lib/libOpenCL.so",
          "/system/lib/libOpenCL.so",
          "/system/vendor/lib/libOpenCL-pixel.so",
          "/vendor/lib/egl/libGLES_mali.so",
          "/system/vendor/lib/egl/libGLES_mali.so",
          "/vendor/lib/libPVROCL.so",
          "/system/vendor/lib/libPVROCL.so"};
#endif
#elif defined(__APPLE__)
  return {"/System/Library/Frameworks/OpenCL.framework/OpenCL"};
#else
  return {"libOpenCL.so.1", "libOpenCL.so"};
#endif
}

const Api& Get() {
  Loaded& s = State();
  if (!s.ok) TVM_FFI_THROW(RuntimeError) << s.error;
  return s.api;
}

bool Available() { return State().ok; }

std::string LoadedPath() { return State().path; }

const char* ErrorName(cl_int err) {
  switch (err) {
    case 0: return "CL_SUCCESS";
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -2: return "CL_DEVICE_NOT_AVAILABLE";
    case -3: return "CL_COMPILER_NOT_AVAILABLE";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -7: return "CL_PROFILING_INFO_NOT_AVAILABLE";
    case -11: return "CL_BUILD_PROGRAM_FAILURE";
    case -30: return "CL_INVALID_VALUE";
    case -33: return "CL_INVALID_DEVICE";
    case -34: return "CL_INVALID_CONTEXT";
    case -35: return "CL_INVALID_QUEUE_PROPERTIES";
    case -36: return "CL_INVALID_COMMAND_QUEUE";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -42: return "CL_INVALID_BINARY";
    case -44: return "CL_INVALID_PROGRAM";
    case -45: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46: return "CL_INVALID_KERNEL_NAME";
    case -48: return "CL_INVALID_KERNEL";
    case -49: return "CL_INVALID_ARG_INDEX";
    case -50: return "CL_INVALID_ARG_VALUE";
    case -51: return "CL_INVALID_ARG_SIZE";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -53: return "CL_INVALID_WORK_DIMENSION";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE";
    case -55: return "CL_INVALID_WORK_ITEM_SIZE";
    case -58: return "CL_INVALID_EVENT";
    case -61: return "CL_INVALID_BUFFER_SIZE";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL_ERROR";
  }
}

}  // namespace cl
}  // namespace tvmgen

// ------------------------------------------------------------------ check against Khronos' cl.h
// cl_api.h's hand-written values must equal the real header's where it is installed. The values
// are captured before cl.h is included (its macros would otherwise rewrite the names).
#if defined(__has_include)
#if __has_include(<CL/cl.h>)
namespace tvmgen_cl_check {
constexpr auto k_CL_DEVICE_NAME = tvmgen::cl::CL_DEVICE_NAME;
constexpr auto k_CL_DRIVER_VERSION = tvmgen::cl::CL_DRIVER_VERSION;
constexpr auto k_CL_DEVICE_VERSION = tvmgen::cl::CL_DEVICE_VERSION;
constexpr auto k_CL_DEVICE_VENDOR = tvmgen::cl::CL_DEVICE_VENDOR;
constexpr auto k_CL_DEVICE_TYPE_GPU = tvmgen::cl::CL_DEVICE_TYPE_GPU;
constexpr auto k_CL_DEVICE_TYPE_CPU = tvmgen::cl::CL_DEVICE_TYPE_CPU;
constexpr auto k_CL_DEVICE_TYPE_ACCELERATOR = tvmgen::cl::CL_DEVICE_TYPE_ACCELERATOR;
constexpr auto k_CL_DEVICE_TYPE_ALL = tvmgen::cl::CL_DEVICE_TYPE_ALL;
constexpr auto k_CL_DEVICE_TYPE = tvmgen::cl::CL_DEVICE_TYPE;
constexpr auto k_CL_DEVICE_MAX_WORK_GROUP_SIZE = tvmgen::cl::CL_DEVICE_MAX_WORK_GROUP_SIZE;
constexpr auto k_CL_DEVICE_MAX_WORK_ITEM_SIZES = tvmgen::cl::CL_DEVICE_MAX_WORK_ITEM_SIZES;
constexpr auto k_CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS = tvmgen::cl::CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS;
constexpr auto k_CL_DEVICE_LOCAL_MEM_SIZE = tvmgen::cl::CL_DEVICE_LOCAL_MEM_SIZE;
constexpr auto k_CL_DEVICE_GLOBAL_MEM_SIZE = tvmgen::cl::CL_DEVICE_GLOBAL_MEM_SIZE;
constexpr auto k_CL_DEVICE_MAX_COMPUTE_UNITS = tvmgen::cl::CL_DEVICE_MAX_COMPUTE_UNITS;
constexpr auto k_CL_DEVICE_MAX_CLOCK_FREQUENCY = tvmgen::cl::CL_DEVICE_MAX_CLOCK_FREQUENCY;
constexpr auto k_CL_PLATFORM_VERSION = tvmgen::cl::CL_PLATFORM_VERSION;
constexpr auto k_CL_PLATFORM_NAME = tvmgen::cl::CL_PLATFORM_NAME;
constexpr auto k_CL_CONTEXT_PLATFORM = tvmgen::cl::CL_CONTEXT_PLATFORM;
constexpr auto k_CL_MEM_READ_WRITE = tvmgen::cl::CL_MEM_READ_WRITE;
constexpr auto k_CL_PROGRAM_DEVICES = tvmgen::cl::CL_PROGRAM_DEVICES;
constexpr auto k_CL_PROGRAM_NUM_DEVICES = tvmgen::cl::CL_PROGRAM_NUM_DEVICES;
constexpr auto k_CL_PROGRAM_BINARY_SIZES = tvmgen::cl::CL_PROGRAM_BINARY_SIZES;
constexpr auto k_CL_PROGRAM_BINARIES = tvmgen::cl::CL_PROGRAM_BINARIES;
constexpr auto k_CL_PROGRAM_BUILD_LOG = tvmgen::cl::CL_PROGRAM_BUILD_LOG;
constexpr auto k_CL_SUCCESS = tvmgen::cl::CL_SUCCESS;
constexpr auto k_CL_TRUE = tvmgen::cl::CL_TRUE;
constexpr auto k_CL_DEVICE_NOT_FOUND = tvmgen::cl::CL_DEVICE_NOT_FOUND;
constexpr auto k_CL_PROFILING_INFO_NOT_AVAILABLE = tvmgen::cl::CL_PROFILING_INFO_NOT_AVAILABLE;
constexpr auto k_CL_INVALID_QUEUE_PROPERTIES = tvmgen::cl::CL_INVALID_QUEUE_PROPERTIES;
constexpr auto k_CL_DEVICE_QUEUE_PROPERTIES = tvmgen::cl::CL_DEVICE_QUEUE_PROPERTIES;
constexpr auto k_CL_QUEUE_PROFILING_ENABLE = tvmgen::cl::CL_QUEUE_PROFILING_ENABLE;
constexpr auto k_CL_PROFILING_COMMAND_START = tvmgen::cl::CL_PROFILING_COMMAND_START;
constexpr auto k_CL_PROFILING_COMMAND_END = tvmgen::cl::CL_PROFILING_COMMAND_END;
constexpr auto k_CL_INVALID_MEM_OBJECT = tvmgen::cl::CL_INVALID_MEM_OBJECT;
constexpr auto k_CL_DEVICE_IMAGE2D_MAX_WIDTH = tvmgen::cl::CL_DEVICE_IMAGE2D_MAX_WIDTH;
constexpr auto k_CL_DEVICE_IMAGE2D_MAX_HEIGHT = tvmgen::cl::CL_DEVICE_IMAGE2D_MAX_HEIGHT;
constexpr auto k_CL_DEVICE_IMAGE_SUPPORT = tvmgen::cl::CL_DEVICE_IMAGE_SUPPORT;
constexpr auto k_CL_DEVICE_EXTENSIONS = tvmgen::cl::CL_DEVICE_EXTENSIONS;
constexpr auto k_CL_DEVICE_IMAGE_MAX_ARRAY_SIZE = tvmgen::cl::CL_DEVICE_IMAGE_MAX_ARRAY_SIZE;
constexpr auto k_CL_RGBA = tvmgen::cl::CL_RGBA;
constexpr auto k_CL_HALF_FLOAT = tvmgen::cl::CL_HALF_FLOAT;
constexpr auto k_CL_FLOAT = tvmgen::cl::CL_FLOAT;
constexpr auto k_CL_MEM_OBJECT_IMAGE2D_ARRAY = tvmgen::cl::CL_MEM_OBJECT_IMAGE2D_ARRAY;
}  // namespace tvmgen_cl_check
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
namespace tvmgen_cl_check {
static_assert(k_CL_DEVICE_NAME == CL_DEVICE_NAME, "cl_api.h: CL_DEVICE_NAME");
static_assert(k_CL_DRIVER_VERSION == CL_DRIVER_VERSION, "cl_api.h: CL_DRIVER_VERSION");
static_assert(k_CL_DEVICE_VERSION == CL_DEVICE_VERSION, "cl_api.h: CL_DEVICE_VERSION");
static_assert(k_CL_DEVICE_VENDOR == CL_DEVICE_VENDOR, "cl_api.h: CL_DEVICE_VENDOR");
static_assert(k_CL_DEVICE_TYPE_GPU == CL_DEVICE_TYPE_GPU, "cl_api.h: CL_DEVICE_TYPE_GPU");
static_assert(k_CL_DEVICE_TYPE_CPU == CL_DEVICE_TYPE_CPU, "cl_api.h: CL_DEVICE_TYPE_CPU");
static_assert(k_CL_DEVICE_TYPE_ACCELERATOR == CL_DEVICE_TYPE_ACCELERATOR, "cl_api.h: CL_DEVICE_TYPE_ACCELERATOR");
static_assert(k_CL_DEVICE_TYPE_ALL == CL_DEVICE_TYPE_ALL, "cl_api.h: CL_DEVICE_TYPE_ALL");
static_assert(k_CL_DEVICE_TYPE == CL_DEVICE_TYPE, "cl_api.h: CL_DEVICE_TYPE");
static_assert(k_CL_DEVICE_MAX_WORK_GROUP_SIZE == CL_DEVICE_MAX_WORK_GROUP_SIZE, "cl_api.h: CL_DEVICE_MAX_WORK_GROUP_SIZE");
static_assert(k_CL_DEVICE_MAX_WORK_ITEM_SIZES == CL_DEVICE_MAX_WORK_ITEM_SIZES, "cl_api.h: CL_DEVICE_MAX_WORK_ITEM_SIZES");
static_assert(k_CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS == CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, "cl_api.h: CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS");
static_assert(k_CL_DEVICE_LOCAL_MEM_SIZE == CL_DEVICE_LOCAL_MEM_SIZE, "cl_api.h: CL_DEVICE_LOCAL_MEM_SIZE");
static_assert(k_CL_DEVICE_GLOBAL_MEM_SIZE == CL_DEVICE_GLOBAL_MEM_SIZE, "cl_api.h: CL_DEVICE_GLOBAL_MEM_SIZE");
static_assert(k_CL_DEVICE_MAX_COMPUTE_UNITS == CL_DEVICE_MAX_COMPUTE_UNITS, "cl_api.h: CL_DEVICE_MAX_COMPUTE_UNITS");
static_assert(k_CL_DEVICE_MAX_CLOCK_FREQUENCY == CL_DEVICE_MAX_CLOCK_FREQUENCY, "cl_api.h: CL_DEVICE_MAX_CLOCK_FREQUENCY");
static_assert(k_CL_PLATFORM_VERSION == CL_PLATFORM_VERSION, "cl_api.h: CL_PLATFORM_VERSION");
static_assert(k_CL_PLATFORM_NAME == CL_PLATFORM_NAME, "cl_api.h: CL_PLATFORM_NAME");
static_assert(k_CL_CONTEXT_PLATFORM == CL_CONTEXT_PLATFORM, "cl_api.h: CL_CONTEXT_PLATFORM");
static_assert(k_CL_MEM_READ_WRITE == CL_MEM_READ_WRITE, "cl_api.h: CL_MEM_READ_WRITE");
static_assert(k_CL_PROGRAM_DEVICES == CL_PROGRAM_DEVICES, "cl_api.h: CL_PROGRAM_DEVICES");
static_assert(k_CL_PROGRAM_NUM_DEVICES == CL_PROGRAM_NUM_DEVICES, "cl_api.h: CL_PROGRAM_NUM_DEVICES");
static_assert(k_CL_PROGRAM_BINARY_SIZES == CL_PROGRAM_BINARY_SIZES, "cl_api.h: CL_PROGRAM_BINARY_SIZES");
static_assert(k_CL_PROGRAM_BINARIES == CL_PROGRAM_BINARIES, "cl_api.h: CL_PROGRAM_BINARIES");
static_assert(k_CL_PROGRAM_BUILD_LOG == CL_PROGRAM_BUILD_LOG, "cl_api.h: CL_PROGRAM_BUILD_LOG");
static_assert(k_CL_SUCCESS == CL_SUCCESS, "cl_api.h: CL_SUCCESS");
static_assert(k_CL_TRUE == CL_TRUE, "cl_api.h: CL_TRUE");
static_assert(k_CL_DEVICE_NOT_FOUND == CL_DEVICE_NOT_FOUND, "cl_api.h: CL_DEVICE_NOT_FOUND");
static_assert(k_CL_PROFILING_INFO_NOT_AVAILABLE == CL_PROFILING_INFO_NOT_AVAILABLE, "cl_api.h: CL_PROFILING_INFO_NOT_AVAILABLE");
static_assert(k_CL_INVALID_QUEUE_PROPERTIES == CL_INVALID_QUEUE_PROPERTIES, "cl_api.h: CL_INVALID_QUEUE_PROPERTIES");
static_assert(k_CL_DEVICE_QUEUE_PROPERTIES == CL_DEVICE_QUEUE_PROPERTIES, "cl_api.h: CL_DEVICE_QUEUE_PROPERTIES");
static_assert(k_CL_QUEUE_PROFILING_ENABLE == CL_QUEUE_PROFILING_ENABLE, "cl_api.h: CL_QUEUE_PROFILING_ENABLE");
static_assert(k_CL_PROFILING_COMMAND_START == CL_PROFILING_COMMAND_START, "cl_api.h: CL_PROFILING_COMMAND_START");
static_assert(k_CL_PROFILING_COMMAND_END == CL_PROFILING_COMMAND_END, "cl_api.h: CL_PROFILING_COMMAND_END");
static_assert(k_CL_INVALID_MEM_OBJECT == CL_INVALID_MEM_OBJECT, "cl_api.h: CL_INVALID_MEM_OBJECT");
static_assert(k_CL_DEVICE_IMAGE2D_MAX_WIDTH == CL_DEVICE_IMAGE2D_MAX_WIDTH, "cl_api.h: CL_DEVICE_IMAGE2D_MAX_WIDTH");
static_assert(k_CL_DEVICE_IMAGE2D_MAX_HEIGHT == CL_DEVICE_IMAGE2D_MAX_HEIGHT, "cl_api.h: CL_DEVICE_IMAGE2D_MAX_HEIGHT");
static_assert(k_CL_DEVICE_IMAGE_SUPPORT == CL_DEVICE_IMAGE_SUPPORT, "cl_api.h: CL_DEVICE_IMAGE_SUPPORT");
static_assert(k_CL_DEVICE_EXTENSIONS == CL_DEVICE_EXTENSIONS, "cl_api.h: CL_DEVICE_EXTENSIONS");
static_assert(k_CL_DEVICE_IMAGE_MAX_ARRAY_SIZE == CL_DEVICE_IMAGE_MAX_ARRAY_SIZE, "cl_api.h: CL_DEVICE_IMAGE_MAX_ARRAY_SIZE");
static_assert(k_CL_RGBA == CL_RGBA, "cl_api.h: CL_RGBA");
static_assert(k_CL_HALF_FLOAT == CL_HALF_FLOAT, "cl_api.h: CL_HALF_FLOAT");
static_assert(k_CL_FLOAT == CL_FLOAT, "cl_api.h: CL_FLOAT");
static_assert(k_CL_MEM_OBJECT_IMAGE2D_ARRAY == CL_MEM_OBJECT_IMAGE2D_ARRAY, "cl_api.h: CL_MEM_OBJECT_IMAGE2D_ARRAY");
static_assert(sizeof(tvmgen::cl::cl_image_desc) == sizeof(::cl_image_desc), "cl_api.h: cl_image_desc");
static_assert(sizeof(tvmgen::cl::cl_image_format) == sizeof(::cl_image_format), "cl_api.h: cl_image_format");
}  // namespace tvmgen_cl_check
#endif
#endif
