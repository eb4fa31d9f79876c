# The JNI bridge (libtvmgen_jni, which loads libtvmgen_jni_bridge) and the Java API (tvmgen.jar).
# Included by ../CMakeLists.txt when TVMGEN_BUILD_JNI is ON. Targets: tvmgen_jni (builds the JNI
# libraries: libtvmgen_jni, libtvmgen_jni_bridge and, on glibc Linux, libtvmgen_jni_sigguard),
# tvmgen_jar. Installed to lib/ and share/java/.
#
# JNI headers come from, in this order:
#   -DTVMGEN_JNI_INCLUDE_DIRS="<jdk>/include;<jdk>/include/linux"   (cross builds: any JDK's headers
#                                                                  serve, jni.h is not architecture-specific)
#   find_package(JNI)                                             (host builds, JAVA_HOME)
#   the compiler's own include path                               (the Android NDK sysroot has jni.h)
# If none has jni.h the JNI library is skipped with a message, not a failure.
# The jar is pure Java: it is built whenever a Java compiler is found (find_package(Java)), also in
# cross builds, where javac runs on the build machine.

set(TVMGEN_JNI_INCLUDE_DIRS "" CACHE STRING
    "Directories holding jni.h and jni_md.h (a JDK's include/ and include/<os>/); found automatically on the host")

# ------------------------------------------------------------------ JNI headers
set(_tvmgen_jni_inc "")
set(_tvmgen_jni_ok OFF)
if(TVMGEN_JNI_INCLUDE_DIRS)
  find_path(_tvmgen_jni_h jni.h PATHS ${TVMGEN_JNI_INCLUDE_DIRS} NO_DEFAULT_PATH NO_CMAKE_FIND_ROOT_PATH)
  if(_tvmgen_jni_h)
    set(_tvmgen_jni_inc ${TVMGEN_JNI_INCLUDE_DIRS})
    set(_tvmgen_jni_ok ON)
  else()
    message(WARNING "TVMGEN_JNI_INCLUDE_DIRS=${TVMGEN_JNI_INCLUDE_DIRS} has no jni.h: the JNI bridge is not built")
  endif()
  unset(_tvmgen_jni_h CACHE)
else()
  # CMake's FindJNI knows few JDK locations (Debian's /usr/lib/jvm/java-17-openjdk-amd64 is not one):
  # without JAVA_HOME, use the JDK that holds the javac on PATH, for native builds.
  if(NOT JAVA_HOME AND NOT DEFINED ENV{JAVA_HOME} AND NOT CMAKE_CROSSCOMPILING)
    find_program(_tvmgen_javac javac)
    if(_tvmgen_javac)
      get_filename_component(_tvmgen_javac_real ${_tvmgen_javac} REALPATH)
      get_filename_component(_tvmgen_jdk ${_tvmgen_javac_real} DIRECTORY)
      get_filename_component(_tvmgen_jdk ${_tvmgen_jdk} DIRECTORY)
      if(EXISTS ${_tvmgen_jdk}/include/jni.h)
        set(JAVA_HOME ${_tvmgen_jdk})
      endif()
    endif()
    unset(_tvmgen_javac CACHE)
  endif()
  # Only the headers are needed (a JNI library must not link libjvm), so JNI_FOUND, which also asks
  # for libjawt/libjvm on older CMake, is not required: the two include paths are enough.
  find_package(JNI QUIET)
  if(JAVA_INCLUDE_PATH AND JAVA_INCLUDE_PATH2 AND EXISTS ${JAVA_INCLUDE_PATH}/jni.h)
    set(_tvmgen_jni_inc ${JAVA_INCLUDE_PATH} ${JAVA_INCLUDE_PATH2})
    set(_tvmgen_jni_ok ON)
  elseif(JNI_INCLUDE_DIRS AND ANDROID)
    set(_tvmgen_jni_inc ${JNI_INCLUDE_DIRS})
    set(_tvmgen_jni_ok ON)
  else()
    include(CheckIncludeFileCXX)
    check_include_file_cxx(jni.h TVMGEN_HAVE_SYSTEM_JNI_H)  # the NDK sysroot, or a system-wide jni.h
    if(TVMGEN_HAVE_SYSTEM_JNI_H)
      set(_tvmgen_jni_ok ON)
    endif()
  endif()
endif()

if(_tvmgen_jni_ok)
  # Two libraries, loaded as one by System.loadLibrary("tvmgen_jni") (org.tvmgen.NativeLib):
  #   libtvmgen_jni         src/jni/loader.cc: no TVM dependency; its JNI_OnLoad dlopens the bridge and puts
  #                         back the JVM's signal handlers that libtvm_ffi's constructor replaces
  #                         (its SIGSEGV backtrace handler would otherwise abort the JVM)
  #   libtvmgen_jni_bridge  the native methods of org.tvmgen.NativeLib, linked with tvmgen_runtime (and
  #                         through it the TVM runtime and tvm-ffi):
  #                           src/jni/model_bridge.cc  Model's, over tvmgen's runtime
  #                           src/jni/ffi_bridge.cc    Module / Function / NDArray's, over tvm-ffi
  #                           src/jni/jni_util.cc      shared helpers, RegisterNatives (TvmgenJniRegister)
  set(_tvmgen_jni_src ${CMAKE_CURRENT_LIST_DIR}/../src/jni)
  add_library(tvmgen_jni_bridge SHARED ${_tvmgen_jni_src}/model_bridge.cc ${_tvmgen_jni_src}/ffi_bridge.cc
                                       ${_tvmgen_jni_src}/jni_util.cc)
  target_include_directories(tvmgen_jni_bridge PRIVATE ${_tvmgen_jni_inc})
  target_link_libraries(tvmgen_jni_bridge PRIVATE tvmgen_runtime)
  add_library(tvmgen_jni SHARED ${_tvmgen_jni_src}/loader.cc)
  target_include_directories(tvmgen_jni PRIVATE ${_tvmgen_jni_inc})
  target_link_libraries(tvmgen_jni PRIVATE ${CMAKE_DL_LIBS})
  set(_tvmgen_jni_targets tvmgen_jni tvmgen_jni_bridge)
  # glibc Linux (x86_64, aarch64): libtvmgen_jni_sigguard, src/jni/signal_guard.cc, which links libtvm_ffi
  # and, loaded first by the loader, keeps its constructor from installing its SIGSEGV handler at all
  # (without it the handler is installed for the ~1 ms until the loader puts the JVM's back).
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND NOT ANDROID AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|aarch64|arm64)$")
    add_library(tvmgen_jni_sigguard SHARED ${_tvmgen_jni_src}/signal_guard.cc)
    if(TARGET tvm_ffi_shared)
      set(_tvmgen_ffi_link tvm_ffi_shared)
    else()
      set(_tvmgen_ffi_link ${_ffi_lib})  # the prebuilt wheel's (../CMakeLists.txt)
    endif()
    # libtvm_ffi is needed though no symbol of it is used; bound at load time (-z now), so that the
    # IFUNC resolver's own calls are bound when it runs.
    target_link_libraries(tvmgen_jni_sigguard PRIVATE -Wl,--no-as-needed ${_tvmgen_ffi_link} -Wl,--as-needed
                          ${CMAKE_DL_LIBS})
    target_link_options(tvmgen_jni_sigguard PRIVATE -Wl,-z,now)
    list(APPEND _tvmgen_jni_targets tvmgen_jni_sigguard)
    add_dependencies(tvmgen_jni tvmgen_jni_sigguard)
  endif()
  add_dependencies(tvmgen_jni tvmgen_jni_bridge)  # building tvmgen_jni builds them all
  foreach(t ${_tvmgen_jni_targets})
    target_compile_options(${t} PRIVATE -Wall -Wextra -Wno-unused-parameter)
    # Exported: JNI_OnLoad/JNI_OnUnload (loader), TvmgenJniRegister/TvmgenJniUnregister (bridge),
    # TvmgenSigguardPatched (guard).
    set_target_properties(${t} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  endforeach()
  install(TARGETS ${_tvmgen_jni_targets} LIBRARY DESTINATION lib)
  if(NOT _tvmgen_jni_inc)
    set(_tvmgen_jni_inc "the compiler's include path")
  endif()
  message(STATUS "tvmgen: JNI bridge libtvmgen_jni + libtvmgen_jni_bridge (JNI headers: ${_tvmgen_jni_inc})")
else()
  message(STATUS "tvmgen: no JNI headers found (jni.h): skipping libtvmgen_jni. Set JAVA_HOME to a JDK, or "
                 "pass -DTVMGEN_JNI_INCLUDE_DIRS=\"<jdk>/include;<jdk>/include/linux\" (any JDK's headers do for "
                 "cross builds), or -DTVMGEN_BUILD_JNI=OFF to silence this")
endif()

# ------------------------------------------------------------------ the Java API jar
find_package(Java COMPONENTS Development QUIET)
if(Java_JAVAC_EXECUTABLE AND Java_JAR_EXECUTABLE)
  include(UseJava)
  file(GLOB _tvmgen_java_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/../java/org/tvmgen/*.java)
  # Java 8 bytecode and API: the jar also serves Android apps (javac >= 9 checks the API with --release).
  if(Java_VERSION VERSION_GREATER_EQUAL 9)
    set(CMAKE_JAVA_COMPILE_FLAGS --release 8 -Xlint:-options -encoding UTF-8)
  else()
    set(CMAKE_JAVA_COMPILE_FLAGS -source 1.8 -target 1.8 -encoding UTF-8)
  endif()
  add_jar(tvmgen_jar SOURCES ${_tvmgen_java_sources} OUTPUT_NAME tvmgen
          ENTRY_POINT org.tvmgen.RunModel)
  install_jar(tvmgen_jar DESTINATION share/java)
  get_target_property(_tvmgen_jar_file tvmgen_jar JAR_FILE)
  message(STATUS "tvmgen: Java API ${_tvmgen_jar_file} (javac ${Java_VERSION_STRING})")
else()
  message(STATUS "tvmgen: no Java compiler found (javac, jar): skipping tvmgen.jar. Set JAVA_HOME to a JDK to build it")
endif()
