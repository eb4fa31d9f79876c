# libtvmgen_vulkan: tvmgen's own Vulkan backend for the TVM runtime (device API "device_api.vulkan" and
# the loader "ffi.Module.load_from_bytes.vulkan" of the SPIR-V kernels `tvmgen compile --device vulkan`
# embeds). It links no Vulkan library: libvulkan is opened with dlopen at run time. Needs only the Vulkan
# headers to build (Debian libvulkan-dev; the NDK's sysroot has them). Loaded by libtvmgen_runtime
# (LoadBackend) when a model's device is vulkan. See docs/gpu.md (Vulkan).
find_path(TVMGEN_VULKAN_INCLUDE vulkan/vulkan.h)
if(NOT TVMGEN_VULKAN_INCLUDE AND CMAKE_CROSSCOMPILING)
  # A cross build (linux-aarch64) whose sysroot lacks them: the Vulkan headers are the same for every
  # architecture, so the build host's are used, through a directory holding only them (adding the host's
  # /usr/include would put its C library's headers before the sysroot's).
  find_path(_tvmgen_host_vulkan vulkan/vulkan.h NO_CMAKE_FIND_ROOT_PATH)
  if(_tvmgen_host_vulkan)
    set(_dir ${CMAKE_CURRENT_BINARY_DIR}/vulkan-headers)
    file(MAKE_DIRECTORY ${_dir})
    foreach(_sub vulkan vk_video)
      if(EXISTS ${_tvmgen_host_vulkan}/${_sub})
        file(COPY ${_tvmgen_host_vulkan}/${_sub} DESTINATION ${_dir})
      endif()
    endforeach()
    set(TVMGEN_VULKAN_INCLUDE ${_dir} CACHE PATH "Vulkan headers (the build host's)" FORCE)
  endif()
endif()
if(NOT TVMGEN_VULKAN_INCLUDE)
  message(STATUS "tvmgen_vulkan: no vulkan/vulkan.h (apt-get install libvulkan-dev): the Vulkan backend is not built")
  return()
endif()
add_library(tvmgen_vulkan SHARED src/vulkan/vulkan_api.cc src/vulkan/workspace.cc src/vulkan/workspace_commands.cc
                                 src/vulkan/recorded_runs.cc src/vulkan/vulkan_device_api.cc src/vulkan/vulkan_module.cc
                                 src/vulkan/vulkan_registration.cc src/opencl/sha256.cc)
target_include_directories(tvmgen_vulkan PRIVATE ${TVMGEN_VULKAN_INCLUDE})
# TVM's DeviceAPI declaration: as for tvmgen_opencl (cmake/opencl.cmake), TVM's header where it exists.
if(EXISTS ${_tvmgen_tvm_include}/tvm/runtime/device_api.h AND NOT TVMGEN_OPENCL_OWN_DEVICE_API)
  target_include_directories(tvmgen_vulkan PRIVATE ${_tvmgen_tvm_include})
else()
  target_compile_definitions(tvmgen_vulkan PRIVATE TVMGEN_OPENCL_OWN_DEVICE_API=1)
endif()
target_link_libraries(tvmgen_vulkan PRIVATE tvmgen_tvm ${CMAKE_DL_LIBS})
target_compile_options(tvmgen_vulkan PRIVATE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
install(TARGETS tvmgen_vulkan LIBRARY DESTINATION lib)
