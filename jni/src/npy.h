// Minimal .npy reading and writing (format versions 1-3, C order): tvmgen-run's inputs and outputs, and the
// initial values of a streaming model's state (the runtime reads those with Parse, header-only because the iOS
// app compiles runtime.cc without npy.cc).
#ifndef TVMGEN_NPY_H_
#define TVMGEN_NPY_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace npy {

struct Array {
  std::string dtype;  // numpy name: float32, int64, uint8, bool ...
  std::vector<int64_t> shape;
  std::vector<char> data;
};

// numpy descr <-> dtype name, little-endian (and byte-order-free single bytes)
inline const std::map<std::string, std::string>& Descrs() {
  static const std::map<std::string, std::string> m = {
      {"<f4", "float32"}, {"<f2", "float16"}, {"<f8", "float64"}, {"|i1", "int8"}, {"|u1", "uint8"},
      {"<i2", "int16"},   {"<i4", "int32"},   {"<i8", "int64"},   {"|b1", "bool"}, {"<u2", "uint16"},
      {"<u4", "uint32"},  {"<u8", "uint64"}};
  return m;
}

inline std::string HeaderField(const std::string& header, const std::string& key, char open, char close) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t a = header.find(open, k + key.size() + 2);
  size_t b = header.find(close, a + 1);
  if (a == std::string::npos || b == std::string::npos) return "";
  return header.substr(a + 1, b - a - 1);
}

/*! \brief A .npy file's bytes as an Array; `name` (a path) is what errors call it. */
inline Array Parse(const char* bytes, size_t size, const std::string& name) {
  if (size < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0) {
    throw Error(name + " is not a .npy file (save inputs with numpy.save, or pass raw bytes with a .bin name)");
  }
  const unsigned char* u = reinterpret_cast<const unsigned char*>(bytes);
  const bool v1 = u[6] == 1;
  const size_t start = v1 ? 10 : 12;
  if (size < start) throw Error(name + ": truncated .npy header");
  size_t header_len = v1 ? (u[8] | (u[9] << 8)) : (u[8] | (u[9] << 8) | (u[10] << 16) | (size_t(u[11]) << 24));
  if (size < start + header_len) throw Error(name + ": truncated .npy header");
  std::string header(bytes + start, header_len);
  Array a;
  std::string descr = HeaderField(header, "descr", '\'', '\'');
  auto it = Descrs().find(descr);
  if (it == Descrs().end()) throw Error(name + ": unsupported .npy dtype '" + descr + "' (little-endian numeric only)");
  a.dtype = it->second;
  if (header.find("'fortran_order': True") != std::string::npos) {
    throw Error(name + ": Fortran-order arrays are not supported (save np.ascontiguousarray(x))");
  }
  std::stringstream dims(HeaderField(header, "shape", '(', ')'));
  std::string dim;
  size_t count = 1;
  while (std::getline(dims, dim, ',')) {
    if (dim.find_first_not_of(" ") == std::string::npos) continue;
    a.shape.push_back(std::stoll(dim));
    count *= static_cast<size_t>(a.shape.back());
  }
  size_t item = a.dtype == "bool" || a.dtype == "int8" || a.dtype == "uint8" ? 1
                : a.dtype == "float16" || a.dtype == "int16" || a.dtype == "uint16" ? 2
                : a.dtype == "float32" || a.dtype == "int32" || a.dtype == "uint32" ? 4 : 8;
  const size_t body = start + header_len;
  if (size - body < count * item) {
    throw Error(name + ": the .npy file holds fewer bytes than its shape needs (truncated)");
  }
  a.data.assign(bytes + body, bytes + body + count * item);
  return a;
}

/*! \brief Read a .npy file; throws tvmgen::Error naming the file and what is wrong. */
Array Load(const std::string& path);
/*! \brief Write a C-order little-endian .npy file. */
void Save(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
          const void* data, size_t nbytes);

}  // namespace npy
}  // namespace tvmgen

#endif  // TVMGEN_NPY_H_
