"""`tvmgen embed`: a bundle that drops the model and the runtime into an existing app.

Layout of the bundle:
    artifact/                the compiled model (manifest.json, library, params)
    lib/                     libtvmgen_runtime.so, libtvmgen_jni.so, the TVM runtime libraries (host, linux-aarch64)
    bin/tvmgen-run           the device-side runner (host, linux-aarch64)
    include/tvmgen/          the C++ API
    java/                    tvmgen.jar and the Java sources
    cmake/tvmgenConfig.cmake imported target tvmgen::runtime for find_package(tvmgen)
    jni/                     (Android) the runtime sources, built by the app's CMake with the NDK
    README.md                the lines to add to an existing Gradle or CMake project
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tvmgen.compiler.targets.platforms import PLATFORMS
from tvmgen.core import artifact, resources
from tvmgen.core.errors import InputError
from tvmgen.runtime import runtime_build


def is_android(platform: str) -> bool:
    """Whether the bundle is for an Android app: the app's Gradle build compiles the runtime with the NDK."""
    return PLATFORMS[platform].exporter == "ndk"


def check_artifact(manifest: artifact.Manifest, platform: str) -> None:
    if manifest.platform != platform:
        raise InputError(
            f"the artifact was compiled for {manifest.platform}, the bundle is for {platform}",
            f"compile the model with --platform {platform}, or pass the model file to embed",
        )


def write_bundle(artifact_dir: Path, platform: str, staged: Path) -> list[str]:
    """Fill ``staged`` with the bundle; returns notes for the user. The runtime's libraries and tools come
    from the cached runtime build (built from jni/ with CMake on first use, reused while jni/ and TVM are
    unchanged)."""
    notes = []
    manifest = artifact.load(artifact_dir)
    shutil.copytree(artifact_dir, staged / "artifact")
    jni = resources.jni_dir()
    shutil.copytree(jni / "include", staged / "include")
    java_src = jni / "java"
    if java_src.is_dir():
        shutil.copytree(java_src, staged / "java" / "src")
    target_abi = manifest.abi
    if not is_android(platform):  # built here: host, or linux-aarch64 cross-built
        prefix = runtime_build.cached_build(platform)
        (staged / "lib").mkdir()
        for so in sorted(p for p in (prefix / "lib").glob("*.so") if p.name != "libtvmgen_rpc.so"):
            shutil.copy2(so, staged / "lib" / so.name)
        (staged / "bin").mkdir()
        shutil.copy2(prefix / "bin" / "tvmgen-run", staged / "bin" / "tvmgen-run")
        if (prefix / "bin" / "tvmgen-clbuild").is_file():  # libtvmgen_opencl's build helper (NVIDIA), from ../bin
            shutil.copy2(prefix / "bin" / "tvmgen-clbuild", staged / "bin" / "tvmgen-clbuild")
        for jar in (prefix / "share" / "java").glob("*.jar"):
            shutil.copy2(jar, staged / "java" / jar.name)
    else:
        shutil.copytree(jni, staged / "jni", ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
        notes.append(
            "Android libraries are built by your app's CMake with the NDK and a TVM source tree "
            "(see README.md in the bundle)"
        )
    (staged / "cmake").mkdir()
    (staged / "cmake" / "tvmgenConfig.cmake").write_text(cmake_config(target_abi, android=is_android(platform)))
    (staged / "README.md").write_text(readme(manifest, platform, target_abi))
    return notes


def cmake_config(abi: str, android: bool) -> str:
    if android:
        return f"""# find_package(tvmgen CONFIG PATHS <bundle>/cmake): builds the runtime from <bundle>/jni.
# Needs TVM_SOURCE_DIR (a TVM source tree); ANDROID_ABI comes from the NDK toolchain ({abi} by default).
get_filename_component(_tvmgen_root "${{CMAKE_CURRENT_LIST_DIR}}/.." ABSOLUTE)
if(NOT TARGET tvmgen_runtime)
  add_subdirectory(${{_tvmgen_root}}/jni ${{CMAKE_BINARY_DIR}}/tvmgen)
endif()
add_library(tvmgen::runtime ALIAS tvmgen_runtime)
set(TVMGEN_ARTIFACT_DIR ${{_tvmgen_root}}/artifact)
"""
    return f"""# find_package(tvmgen CONFIG PATHS <bundle>/cmake): imported target tvmgen::runtime ({abi}).
get_filename_component(_tvmgen_root "${{CMAKE_CURRENT_LIST_DIR}}/.." ABSOLUTE)
if(NOT TARGET tvmgen::runtime)
  add_library(tvmgen::runtime SHARED IMPORTED)
  set_target_properties(tvmgen::runtime PROPERTIES
    IMPORTED_LOCATION ${{_tvmgen_root}}/lib/libtvmgen_runtime.so
    INTERFACE_INCLUDE_DIRECTORIES ${{_tvmgen_root}}/include
    INTERFACE_LINK_OPTIONS "-Wl,-rpath,${{_tvmgen_root}}/lib")
endif()
set(TVMGEN_ARTIFACT_DIR ${{_tvmgen_root}}/artifact)
"""


def readme(manifest: artifact.Manifest, platform: str, abi: str) -> str:
    # a streaming model's state tensors are the runtime's, not the caller's: the snippets use the others
    first_in, first_out = manifest.own_inputs[0], manifest.own_outputs[0]
    inputs = ", ".join(map(str, manifest.own_inputs))
    outputs = ", ".join(map(str, manifest.own_outputs))
    if manifest.state:
        held = ", ".join(s["input"] for s in manifest.state)
        outputs += f"; state held by the runtime between runs: {held} (docs/streaming.md)"
    cpp = f"""```cpp
#include <tvmgen/runtime.h>
auto model = tvmgen::Model::Load("path/to/artifact");
model->SetInput("{first_in.name}", input_bytes, {first_in.nbytes});
model->Run();
model->GetOutput(0, output_bytes, {first_out.nbytes});
```"""
    java = f"""```java
try (org.tvmgen.Model model = org.tvmgen.Model.load(artifactDir)) {{
    model.setInput("{first_in.name}", inputFloats);
    model.run();
    float[] out = model.getOutputFloats(0);
}}
```"""
    if is_android(platform):
        build = f"""## Add to an Android app

1. Copy `artifact/` into `app/src/main/assets/model/` and load it from there with
   `org.tvmgen.AndroidAssets.load(getAssets(), "model", threads, affinity)`: nothing is copied to files
   (the library loads from memory). For a library mapped in place from the APK, use `tvmgen aar` or
   `tvmgen app`, which package it under `jniLibs/` (see docs/commands/aar.md).
2. In `app/build.gradle` (Android Gradle Plugin 8.x):
```groovy
android {{
    defaultConfig {{ ndk {{ abiFilters '{abi}' }} }}
    externalNativeBuild {{ cmake {{ path file('<bundle>/jni/CMakeLists.txt') }} }}
    defaultConfig {{ externalNativeBuild {{ cmake {{ arguments "-DTVM_SOURCE_DIR=/path/to/tvm" }} }} }}
}}
dependencies {{ implementation files('<bundle>/java/tvmgen.jar') }}  // or add java/src as a source dir
android {{ sourceSets {{ main.java.srcDirs += '<bundle>/jni/java-android' }} }}  // AndroidAssets: models from assets
```
The same build by hand, per ABI:
```sh
cmake -S <bundle>/jni -B build-{abi} -DCMAKE_TOOLCHAIN_FILE=$ANDROID_NDK_HOME/build/cmake/android.toolchain.cmake \\
      -DANDROID_ABI={abi} -DANDROID_PLATFORM=android-24 -DTVM_SOURCE_DIR=/path/to/tvm && cmake --build build-{abi}
```
"""
    else:
        build = """## Add to a CMake project

```cmake
find_package(tvmgen CONFIG REQUIRED PATHS <bundle>/cmake)
target_link_libraries(your_app PRIVATE tvmgen::runtime)
```
Ship `lib/*.so` with your binary (or keep the rpath the package sets). Try the model first with
`bin/tvmgen-run artifact --repeat 10`.
Java: `java -Djava.library.path=<bundle>/lib -cp <bundle>/java/tvmgen.jar:... YourMain`.
"""
    return f"""# tvmgen runtime bundle: {manifest.model.get("name")} for {platform} ({abi})

Model: {manifest.model.get("name")} ({manifest.model.get("format")}), device {manifest.device}
Inputs: {inputs}
Outputs: {outputs}

{build}
## Use it

C++:
{cpp}

Java:
{java}
"""
