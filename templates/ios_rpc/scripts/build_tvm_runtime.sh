#!/bin/sh
# Xcode build phase: the TVM runtime for iOS (arm64, Metal on, no LLVM), built once from
# TVM_SOURCE_DIR as static libraries into build/tvm-ios/, which the app links with -force_load.
# Run by hand to see its output: TVM_SOURCE_DIR=/path/to/tvm PROJECT_DIR=$PWD scripts/build_tvm_runtime.sh
set -eu
: "${PROJECT_DIR:=$(cd "$(dirname "$0")/.." && pwd)}"
OUT="$PROJECT_DIR/build/tvm-ios"
if [ -f "$OUT/libtvm_runtime.a" ] && [ -f "$OUT/libtvm_ffi_static.a" ]; then
  exit 0  # built already; delete build/tvm-ios to rebuild
fi
if [ -z "${TVM_SOURCE_DIR:-}" ] || [ ! -f "$TVM_SOURCE_DIR/CMakeLists.txt" ]; then
  echo "error: TVM_SOURCE_DIR must name a TVM v0.27 source tree (git clone --recursive --branch v0.27.0" \
       "https://github.com/apache/tvm), e.g. xcodebuild ... TVM_SOURCE_DIR=/path/to/tvm" >&2
  exit 1
fi
command -v cmake >/dev/null || { echo "error: cmake not found: brew install cmake" >&2; exit 1; }
BUILD="$PROJECT_DIR/build/tvm-ios-cmake"
# Xcode's environment points the compilers at the macOS SDK: start clean.
env -i PATH="$PATH" HOME="$HOME" cmake -S "$TVM_SOURCE_DIR" -B "$BUILD" \
  -DCMAKE_SYSTEM_NAME=iOS -DCMAKE_OSX_ARCHITECTURES=arm64 -DCMAKE_OSX_DEPLOYMENT_TARGET=15.0 \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_STATIC_RUNTIME=ON -DUSE_LLVM=OFF -DUSE_METAL=ON -DUSE_OPENCL=OFF \
  -DUSE_LIBBACKTRACE=OFF -DTVM_FFI_BACKTRACE_ON_SEGFAULT=OFF -DUSE_RPC=ON -DUSE_CPP_RPC=OFF
env -i PATH="$PATH" HOME="$HOME" cmake --build "$BUILD" --target tvm_runtime tvm_ffi_static --parallel
mkdir -p "$OUT"
for lib in libtvm_runtime.a libtvm_ffi_static.a; do
  found=$(find "$BUILD" -name "$lib" -type f | head -n 1)
  [ -n "$found" ] || { echo "error: the TVM build made no $lib (see $BUILD)" >&2; exit 1; }
  cp "$found" "$OUT/$lib"
done
