// The OpenCL kernel module's source handling and scalar conversions (program_sources.h).
#include "program_sources.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

namespace tvmgen {
namespace opencl {

// Which parameters of kernel `name` the OpenCL source declares as images ("__kernel void name(...)").
std::vector<bool> ImageParams(const std::string& src, const std::string& name) {
  std::vector<bool> out;
  size_t pos = src.find("__kernel void " + name + "(");
  if (pos == std::string::npos) return out;
  size_t begin = pos + 15 + name.size(), end = src.find(')', begin);
  if (end == std::string::npos) return out;
  std::string params = src.substr(begin, end - begin);
  size_t start = 0;
  while (start <= params.size()) {
    size_t comma = params.find(',', start);
    std::string p = params.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(p.find("image1d") != std::string::npos || p.find("image2d") != std::string::npos ||
                  p.find("image3d") != std::string::npos);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// IEEE half from float (round to nearest even), for float16 scalar kernel arguments.
uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xFFu, mant = x & 0x7FFFFFu;
  if (exp == 0xFFu) return static_cast<uint16_t>(sign | 0x7C00u | (mant ? 0x200u : 0u));  // inf / nan
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);                             // overflow: inf
  if (e <= 0) {                                                                           // subnormal or 0
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t h = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13), rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still right
  return static_cast<uint16_t>(sign | h);
}

// TVM's OpenCL source split into its kernels at the "// Function: NAME" lines, in source order.
std::vector<std::pair<std::string, std::string>> SplitSource(const std::string& src) {
  static const std::string marker = "// Function: ";
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = src.find(marker);
  while (pos != std::string::npos) {
    size_t name_begin = pos + marker.size();
    size_t eol = src.find('\n', name_begin);
    if (eol == std::string::npos) break;
    std::string name = src.substr(name_begin, eol - name_begin);
    while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
    size_t next = src.find(marker, eol + 1);
    out.emplace_back(name, src.substr(eol + 1, next == std::string::npos ? std::string::npos : next - eol - 1));
    pos = next;
  }
  return out;
}

// Where kernel `name`'s definition starts in its section (npos if nowhere). TVM declares every kernel
// of the module on one line ending in ");" before the definition.
size_t DefinitionStart(const std::string& section, const std::string& name) {
  size_t pos = 0;
  while (pos < section.size()) {
    size_t eol = section.find('\n', pos);
    std::string line = section.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.rfind("__kernel ", 0) == 0 && line.find(" " + name + "(") != std::string::npos && line.back() != ';') {
      return pos;
    }
    if (eol == std::string::npos) break;
    pos = eol + 1;
  }
  return std::string::npos;
}

// One source for several kernels. TVM 0.27 writes each kernel as a whole translation unit: the
// declaration of every kernel of the module, the macros and pragmas this kernel needs, its definition.
// Merged: each distinct block of macros and pragmas once (a block already contained in what is kept
// is dropped), each declaration once, then the definitions. "" when a section is not of that shape.
std::string MergeSources(const std::vector<const std::pair<std::string, std::string>*>& kernels) {
  if (kernels.size() == 1) return kernels[0]->second;
  std::string blocks, decls, defs;
  std::unordered_set<std::string> declared;
  for (const auto* k : kernels) {
    const std::string& section = k->second;
    size_t def = DefinitionStart(section, k->first);
    if (def == std::string::npos) return "";
    std::string block;
    size_t pos = 0;
    while (pos < def) {
      size_t eol = std::min(section.find('\n', pos), def);
      std::string line = section.substr(pos, eol - pos);
      std::string trimmed = line;
      while (!trimmed.empty() && (trimmed.back() == '\r' || trimmed.back() == ' ')) trimmed.pop_back();
      if (trimmed.rfind("__kernel ", 0) == 0 && !trimmed.empty() && trimmed.back() == ';') {
        if (declared.insert(trimmed).second) decls += trimmed + "\n";
      } else {
        block += line + "\n";
      }
      pos = eol + 1;
    }
    if (block.find_first_not_of(" \r\n\t") != std::string::npos && blocks.find(block) == std::string::npos) {
      blocks += block;
    }
    defs += "// Function: " + k->first + "\n" + section.substr(def);
    if (defs.back() != '\n') defs += "\n";
  }
  return blocks + decls + defs;
}


bool KernelsPerProgramSet() {
  const char* v = std::getenv("TVMGEN_OPENCL_KERNELS_PER_PROGRAM");
  return v && *v;
}

int KernelsPerProgram() {
  static int n = [] {
    const char* v = std::getenv("TVMGEN_OPENCL_KERNELS_PER_PROGRAM");
    return v && *v ? std::max(0, std::atoi(v)) : 8;
  }();
  return n;
}

}  // namespace opencl
}  // namespace tvmgen
