// The OpenCL kernel module's parts: its functions' signatures (read from the module blob), TVM's source
// split into its kernels and merged back into programs, and the scalar conversions of a launch
// (program_sources.cc). The module itself: opencl_module.cc.
#ifndef TVMGEN_OPENCL_PROGRAM_SOURCES_H_
#define TVMGEN_OPENCL_PROGRAM_SOURCES_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "opencl_common.h"

namespace tvmgen {
namespace opencl {

struct FunctionInfo {
  std::string name;
  std::vector<DLDataType> arg_types;
  std::vector<std::string> launch_tags;
  std::vector<bool> image_args;  // parameters declared image2d*_t in the kernel's source (texture memory)
};

// Which parameters of kernel `name` the OpenCL source declares as images ("__kernel void name(...)").
std::vector<bool> ImageParams(const std::string& src, const std::string& name);

// IEEE half from float (round to nearest even), for float16 scalar kernel arguments.
uint16_t FloatToHalf(float f);

// TVM's OpenCL source split into its kernels at the "// Function: NAME" lines, in source order.
std::vector<std::pair<std::string, std::string>> SplitSource(const std::string& src);

// Where kernel `name`'s definition starts in its section (npos if nowhere). TVM declares every kernel
// of the module on one line ending in ");" before the definition.
size_t DefinitionStart(const std::string& section, const std::string& name);

// One source for several kernels. TVM 0.27 writes each kernel as a whole translation unit: the
// declaration of every kernel of the module, the macros and pragmas this kernel needs, its definition.
// Merged: each distinct block of macros and pragmas once (a block already contained in what is kept
// is dropped), each declaration once, then the definitions. "" when a section is not of that shape.
std::string MergeSources(const std::vector<const std::pair<std::string, std::string>*>& kernels);

// Kernels per OpenCL program: TVMGEN_OPENCL_KERNELS_PER_PROGRAM, 8 by default (0: one program per module,
// 1: one per kernel). Drivers compile program by program at a cost per program (NVIDIA's 580 driver builds
// one at a time in a process: 57 kernels as 57 programs made a 4.4 s first run), while one program per model
// is loaded from the cache as one piece ahead of the first kernel (a discrete NVIDIA GPU: a 4-15 ms first run
// instead of 1-5 ms). Groups of 8, built and loaded by parallel threads, measured best of both (docs/benchmarks.md).
bool KernelsPerProgramSet();
int KernelsPerProgram();

// One program of a module: its kernels and its source.
struct ProgramSource {
  std::vector<std::string> kernels;
  std::string source;
  std::string sha, key;  // Sha256Hex(source) and its cache key, where computed ahead (the helper-process path)
};

// The kernel module of a module blob's parts (opencl_module.cc; the blob is read by LoadFromBytes).
ffi::Module MakeModule(std::string blob, std::string fmt, std::map<std::string, FunctionInfo> fmap, std::string code);

}  // namespace opencl
}  // namespace tvmgen

#endif  // TVMGEN_OPENCL_PROGRAM_SOURCES_H_
