# tvmgen_model_library(TARGET ABI ARCH DIR OBJECTS ... SOURCES ...): lib<TARGET>.so linked from the objects and
# sources in DIR of a model tvmgen compiled to objects only (no NDK where it ran): the library the model's assets
# name in library.txt. The deploy app's CMake includes it from beside itself; `tvmgen aar` copies it next to the
# tvmgen-model.cmake an AAR carries.
#
# The includer sets the options of tvmgen's own link of a model library (its compiler/targets/export.py):
# TVMGEN_MODEL_COMPILE_FLAGS for the parallel launcher's source, TVMGEN_MODEL_LINK_FLAGS (the C++ runtime inside
# the library, 16 KB pages). The model's calls into TVM's runtime resolve when the runtime loads the library, so
# undefined symbols are allowed (the NDK's toolchain forbids them in shared libraries unless told). For another
# ABI (or, outside Android, another processor) the objects cannot be linked: an empty target instead, as Gradle's
# targets name it for every ABI.
include_guard(GLOBAL)

function(tvmgen_model_library target abi arch dir)
  cmake_parse_arguments(PARSE_ARGV 4 MODEL "" "" "OBJECTS;SOURCES")
  if((ANDROID AND NOT ANDROID_ABI STREQUAL abi) OR (NOT ANDROID AND NOT CMAKE_SYSTEM_PROCESSOR STREQUAL arch))
    add_custom_target(${target})
    return()
  endif()
  list(TRANSFORM MODEL_OBJECTS PREPEND ${dir}/)
  list(TRANSFORM MODEL_SOURCES PREPEND ${dir}/)
  set_source_files_properties(${MODEL_OBJECTS} PROPERTIES EXTERNAL_OBJECT TRUE)
  add_library(${target} SHARED ${MODEL_OBJECTS} ${MODEL_SOURCES})
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
  target_compile_options(${target} PRIVATE ${TVMGEN_MODEL_COMPILE_FLAGS})
  target_link_options(${target} PRIVATE ${TVMGEN_MODEL_LINK_FLAGS} LINKER:-z,undefs)
endfunction()
