// The slice of the OpenCL 1.2 C API tvmgen's OpenCL runtime uses, declared here so the library
// builds without the Khronos headers (the Android NDK has none) and opens libOpenCL.so at run
// time with dlopen: a phone without OpenCL (or a host without an ICD) gets a clear error instead
// of a library that fails to load.
#ifndef TVMGEN_OPENCL_CL_API_H_
#define TVMGEN_OPENCL_CL_API_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tvmgen {
namespace cl {

using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bool = cl_uint;
using cl_bitfield = cl_ulong;
using cl_device_type = cl_bitfield;
using cl_mem_flags = cl_bitfield;
using cl_command_queue_properties = cl_bitfield;
using cl_map_flags = cl_bitfield;
using cl_platform_info = cl_uint;
using cl_device_info = cl_uint;
using cl_program_info = cl_uint;
using cl_program_build_info = cl_uint;
using cl_context_properties = intptr_t;
using cl_profiling_info = cl_uint;
using cl_channel_order = cl_uint;
using cl_channel_type = cl_uint;
using cl_mem_object_type = cl_uint;

using cl_platform_id = struct _cl_platform_id*;
using cl_device_id = struct _cl_device_id*;
using cl_context = struct _cl_context*;
using cl_command_queue = struct _cl_command_queue*;
using cl_mem = struct _cl_mem*;
using cl_program = struct _cl_program*;
using cl_kernel = struct _cl_kernel*;
using cl_event = struct _cl_event*;

struct cl_image_format {
  cl_channel_order image_channel_order;
  cl_channel_type image_channel_data_type;
};

struct cl_image_desc {  // OpenCL 1.2 (2.0 names the last member mem_object: same layout)
  cl_mem_object_type image_type;
  size_t image_width, image_height, image_depth, image_array_size, image_row_pitch, image_slice_pitch;
  cl_uint num_mip_levels, num_samples;
  cl_mem buffer;
};

// Values from the Khronos cl.h (checked against it in cl_api.cc when it is installed).
constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_PROFILING_INFO_NOT_AVAILABLE = -7;
constexpr cl_int CL_INVALID_QUEUE_PROPERTIES = -35;
constexpr cl_int CL_INVALID_MEM_OBJECT = -38;
constexpr cl_bool CL_TRUE = 1;
constexpr cl_device_type CL_DEVICE_TYPE_CPU = 1 << 1;
constexpr cl_device_type CL_DEVICE_TYPE_GPU = 1 << 2;
constexpr cl_device_type CL_DEVICE_TYPE_ACCELERATOR = 1 << 3;
constexpr cl_device_type CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;
constexpr cl_platform_info CL_PLATFORM_VERSION = 0x0901;
constexpr cl_platform_info CL_PLATFORM_NAME = 0x0902;
constexpr cl_device_info CL_DEVICE_TYPE = 0x1000;
constexpr cl_device_info CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002;
constexpr cl_device_info CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS = 0x1003;
constexpr cl_device_info CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004;
constexpr cl_device_info CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1005;
constexpr cl_device_info CL_DEVICE_MAX_CLOCK_FREQUENCY = 0x100C;
constexpr cl_device_info CL_DEVICE_IMAGE2D_MAX_WIDTH = 0x1011;
constexpr cl_device_info CL_DEVICE_IMAGE2D_MAX_HEIGHT = 0x1012;
constexpr cl_device_info CL_DEVICE_IMAGE_SUPPORT = 0x1016;
constexpr cl_device_info CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;
constexpr cl_device_info CL_DEVICE_LOCAL_MEM_SIZE = 0x1023;
constexpr cl_device_info CL_DEVICE_QUEUE_PROPERTIES = 0x102A;  // CL_DEVICE_QUEUE_ON_HOST_PROPERTIES in 2.0
constexpr cl_device_info CL_DEVICE_NAME = 0x102B;
constexpr cl_device_info CL_DEVICE_VENDOR = 0x102C;
constexpr cl_device_info CL_DRIVER_VERSION = 0x102D;
constexpr cl_device_info CL_DEVICE_VERSION = 0x102F;
constexpr cl_device_info CL_DEVICE_EXTENSIONS = 0x1030;
constexpr cl_device_info CL_DEVICE_IMAGE_MAX_ARRAY_SIZE = 0x1041;
constexpr cl_channel_order CL_RGBA = 0x10B5;
constexpr cl_channel_type CL_HALF_FLOAT = 0x10DD;
constexpr cl_channel_type CL_FLOAT = 0x10DE;
constexpr cl_mem_object_type CL_MEM_OBJECT_IMAGE2D_ARRAY = 0x10F3;
constexpr cl_context_properties CL_CONTEXT_PLATFORM = 0x1084;
constexpr cl_mem_flags CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_mem_flags CL_MEM_ALLOC_HOST_PTR = 1 << 4;
constexpr cl_command_queue_properties CL_QUEUE_PROFILING_ENABLE = 1 << 1;
constexpr cl_profiling_info CL_PROFILING_COMMAND_START = 0x1282;
constexpr cl_profiling_info CL_PROFILING_COMMAND_END = 0x1283;
constexpr cl_map_flags CL_MAP_READ = 1 << 0;
constexpr cl_map_flags CL_MAP_WRITE = 1 << 1;
constexpr cl_program_info CL_PROGRAM_NUM_DEVICES = 0x1162;
constexpr cl_program_info CL_PROGRAM_DEVICES = 0x1163;
constexpr cl_program_info CL_PROGRAM_BINARY_SIZES = 0x1165;
constexpr cl_program_info CL_PROGRAM_BINARIES = 0x1166;
constexpr cl_program_build_info CL_PROGRAM_BUILD_LOG = 0x1183;
typedef cl_uint cl_kernel_work_group_info;
constexpr cl_kernel_work_group_info CL_KERNEL_WORK_GROUP_SIZE = 0x11B0;
constexpr cl_kernel_work_group_info CL_KERNEL_LOCAL_MEM_SIZE = 0x11B2;

// The entry points, resolved by dlsym. CL_API_CALL is empty on Linux and Android.
struct Api {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*);
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void*, size_t*);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id*, cl_uint*);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_device_info, size_t, void*, size_t*);
  cl_context (*CreateContext)(const cl_context_properties*, cl_uint, const cl_device_id*,
                              void (*)(const char*, const void*, size_t, void*), void*, cl_int*);
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_command_queue_properties, cl_int*);
  cl_int (*ReleaseCommandQueue)(cl_command_queue);
  cl_mem (*CreateBuffer)(cl_context, cl_mem_flags, size_t, void*, cl_int*);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint,
                              const cl_event*, cl_event*);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint,
                               const cl_event*, cl_event*);
  cl_int (*EnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint,
                              const cl_event*, cl_event*);
  cl_int (*Finish)(cl_command_queue);
  cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char**, const size_t*, cl_int*);
  cl_program (*CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id*, const size_t*,
                                        const unsigned char**, cl_int*, cl_int*);
  cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*,
                         void (*)(cl_program, void*), void*);
  cl_int (*GetProgramInfo)(cl_program, cl_program_info, size_t, void*, size_t*);
  cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_program_build_info, size_t, void*, size_t*);
  cl_int (*ReleaseProgram)(cl_program);
  cl_kernel (*CreateKernel)(cl_program, const char*, cl_int*);
  cl_int (*ReleaseKernel)(cl_kernel);
  cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void*);
  cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*,
                                 const size_t*, cl_uint, const cl_event*, cl_event*);
  // Optional (nullptr when the library lacks it): each kernel's work-group checked at its first launch.
  cl_int (*GetKernelWorkGroupInfo)(cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void*, size_t*);
  // Optional (nullptr when the library lacks them): used for host-visible ("global.host") buffers.
  void* (*EnqueueMapBuffer)(cl_command_queue, cl_mem, cl_bool, cl_map_flags, size_t, size_t, cl_uint,
                            const cl_event*, cl_event*, cl_int*);
  cl_int (*EnqueueUnmapMemObject)(cl_command_queue, cl_mem, void*, cl_uint, const cl_event*, cl_event*);
  // Optional: the profiling mode (tvmgen.opencl.profiling) needs them and names the missing one.
  cl_int (*GetEventProfilingInfo)(cl_event, cl_profiling_info, size_t, void*, size_t*);
  cl_int (*WaitForEvents)(cl_uint, const cl_event*);
  cl_int (*ReleaseEvent)(cl_event);
  // Optional (OpenCL 1.2 images): texture memory ("global.texture*" scopes) needs them and names the missing one.
  cl_mem (*CreateImage)(cl_context, cl_mem_flags, const cl_image_format*, const cl_image_desc*, void*, cl_int*);
  cl_int (*EnqueueReadImage)(cl_command_queue, cl_mem, cl_bool, const size_t*, const size_t*, size_t, size_t, void*,
                             cl_uint, const cl_event*, cl_event*);
  cl_int (*EnqueueWriteImage)(cl_command_queue, cl_mem, cl_bool, const size_t*, const size_t*, size_t, size_t,
                              const void*, cl_uint, const cl_event*, cl_event*);
  cl_int (*EnqueueCopyImage)(cl_command_queue, cl_mem, cl_mem, const size_t*, const size_t*, const size_t*, cl_uint,
                             const cl_event*, cl_event*);
  cl_int (*EnqueueCopyImageToBuffer)(cl_command_queue, cl_mem, cl_mem, const size_t*, const size_t*, size_t, cl_uint,
                                     const cl_event*, cl_event*);
  cl_int (*EnqueueCopyBufferToImage)(cl_command_queue, cl_mem, cl_mem, size_t, const size_t*, const size_t*, cl_uint,
                                     const cl_event*, cl_event*);
};

/*!
 * \brief The OpenCL API, loaded on first use. Throws tvmgen's error naming every path tried
 * when no usable libOpenCL is found. TVMGEN_OPENCL_LIBRARY=<path> tries only that path.
 */
const Api& Get();
/*! \brief Whether the API could be loaded (never throws). */
bool Available();
/*! \brief The library actually opened ("" before loading / when none). */
std::string LoadedPath();
/*! \brief The candidate paths, in the order they are tried. */
std::vector<std::string> CandidatePaths();
/*! \brief The symbolic name of an OpenCL error code (CL_INVALID_VALUE ...). */
const char* ErrorName(cl_int err);

}  // namespace cl
}  // namespace tvmgen

#endif  // TVMGEN_OPENCL_CL_API_H_
