# libtvmgen_opencl: tvmgen's own OpenCL support for the TVM runtime (device API "device_api.opencl",
# the loader "ffi.Module.load_from_bytes.opencl" and an on-disk kernel cache). It links no OpenCL
# library: libOpenCL.so is opened with dlopen at run time, so the same build runs on phones with
# and without OpenCL. Loaded by libtvmgen_runtime (LoadBackend) when a model's device is opencl.
# See src/opencl/README.md.
option(TVMGEN_OPENCL_OWN_DEVICE_API "Use tvmgen's declaration of tvm::runtime::DeviceAPI even where TVM's header exists" OFF)

add_library(tvmgen_opencl SHARED src/opencl/opencl_module.cc src/opencl/program_sources.cc
                                 src/opencl/opencl_registration.cc src/opencl/opencl_device_api.cc src/opencl/kernel_cache.cc
                                 src/opencl/texture_allocator.cc src/opencl/build_helpers.cc
                                 src/opencl/cl_api.cc src/opencl/sha256.cc)
# TVM's tvm/runtime/device_api.h (+ base.h): in the source tree, or shipped in the apache-tvm wheel.
# The unpacked aarch64 wheel has no headers: src/opencl/device_api.h then declares the class itself.
if(TVM_SOURCE_DIR)
  set(_tvmgen_tvm_include ${TVM_SOURCE_DIR}/include)
else()
  set(_tvmgen_tvm_include ${TVMGEN_TVM_PREBUILT}/tvm/include)
endif()
if(EXISTS ${_tvmgen_tvm_include}/tvm/runtime/device_api.h AND NOT TVMGEN_OPENCL_OWN_DEVICE_API)
  target_include_directories(tvmgen_opencl PRIVATE ${_tvmgen_tvm_include})
else()
  message(STATUS "tvmgen_opencl: no tvm/runtime/device_api.h under ${_tvmgen_tvm_include}: "
                 "using tvmgen's own declaration of tvm::runtime::DeviceAPI (TVM 0.27 layout)")
  target_compile_definitions(tvmgen_opencl PRIVATE TVMGEN_OPENCL_OWN_DEVICE_API=1)
endif()
target_link_libraries(tvmgen_opencl PRIVATE tvmgen_tvm ${CMAKE_DL_LIBS})
target_compile_options(tvmgen_opencl PRIVATE -Wall -Wextra -Wno-unused-parameter)
install(TARGETS tvmgen_opencl LIBRARY DESTINATION lib)
# tvmgen-clbuild: the helper process that builds a cold start's programs into the kernel cache where the driver
# builds one program at a time per process (NVIDIA); found beside libtvmgen_opencl or in ../bin. Not on Android.
if(TVMGEN_BUILD_TOOLS AND NOT ANDROID)
  add_executable(tvmgen-clbuild tools/tvmgen_clbuild.cc)
  target_link_libraries(tvmgen-clbuild PRIVATE tvmgen_opencl)
  install(TARGETS tvmgen-clbuild RUNTIME DESTINATION bin)
endif()
