#include "npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace npy {

Array Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open input file " + path + ": " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error("reading " + path + " failed: " + std::strerror(errno));
  return Parse(bytes.data(), bytes.size(), path);
}

void Save(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
          const void* data, size_t nbytes) {
  std::string descr;
  for (const auto& kv : Descrs()) {
    if (kv.second == dtype) descr = kv.first;
  }
  if (descr.empty()) throw Error("cannot write dtype " + dtype + " to .npy");
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(len_bytes, 2);
  f.write(header.data(), header.size());
  f.write(static_cast<const char*>(data), nbytes);
  if (!f) throw Error("writing " + path + " failed");
}

}  // namespace npy
}  // namespace tvmgen
