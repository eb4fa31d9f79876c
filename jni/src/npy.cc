#include "npy.h"

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace npy {
namespace {

// numpy descr <-> dtype name, little-endian (and byte-order-free single bytes)
const std::map<std::string, std::string>& Descrs() {
  static const std::map<std::string, std::string> m = {
      {"<f4", "float32"}, {"<f2", "float16"}, {"<f8", "float64"}, {"|i1", "int8"}, {"|u1", "uint8"},
      {"<i2", "int16"},   {"<i4", "int32"},   {"<i8", "int64"},   {"|b1", "bool"}, {"<u2", "uint16"},
      {"<u4", "uint32"},  {"<u8", "uint64"}};
  return m;
}

std::string Between(const std::string& header, const std::string& key, char open, char close) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t a = header.find(open, k + key.size() + 2);
  size_t b = header.find(close, a + 1);
  if (a == std::string::npos || b == std::string::npos) return "";
  return header.substr(a + 1, b - a - 1);
}

}  // namespace

Array Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open input file " + path + ": " + std::strerror(errno));
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    throw Error(path + " is not a .npy file (save inputs with numpy.save, or pass raw bytes with a .bin name)");
  }
  uint32_t header_len = 0;
  unsigned char len_bytes[4] = {0};
  if (magic[6] == 1) {
    if (!f.read(reinterpret_cast<char*>(len_bytes), 2)) throw Error(path + ": truncated .npy header");
    header_len = len_bytes[0] | (len_bytes[1] << 8);
  } else {
    if (!f.read(reinterpret_cast<char*>(len_bytes), 4)) throw Error(path + ": truncated .npy header");
    header_len = len_bytes[0] | (len_bytes[1] << 8) | (len_bytes[2] << 16) | (uint32_t(len_bytes[3]) << 24);
  }
  std::string header(header_len, '\0');
  if (!f.read(&header[0], header_len)) throw Error(path + ": truncated .npy header");
  Array a;
  std::string descr = Between(header, "descr", '\'', '\'');
  auto it = Descrs().find(descr);
  if (it == Descrs().end()) throw Error(path + ": unsupported .npy dtype '" + descr + "' (little-endian numeric only)");
  a.dtype = it->second;
  if (header.find("'fortran_order': True") != std::string::npos) {
    throw Error(path + ": Fortran-order arrays are not supported (save np.ascontiguousarray(x))");
  }
  std::stringstream dims(Between(header, "shape", '(', ')'));
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
  a.data.resize(count * item);
  if (!f.read(a.data.data(), a.data.size())) {
    throw Error(path + ": the .npy file holds fewer bytes than its shape needs (truncated)");
  }
  return a;
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
