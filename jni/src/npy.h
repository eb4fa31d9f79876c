// Minimal .npy reading and writing (format versions 1-3, C order), for tvmgen-run.
#ifndef TVMGEN_NPY_H_
#define TVMGEN_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tvmgen {
namespace npy {

struct Array {
  std::string dtype;  // numpy name: float32, int64, uint8, bool ...
  std::vector<int64_t> shape;
  std::vector<char> data;
};

/*! \brief Read a .npy file; throws tvmgen::Error naming the file and what is wrong. */
Array Load(const std::string& path);
/*! \brief Write a C-order little-endian .npy file. */
void Save(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape,
          const void* data, size_t nbytes);

}  // namespace npy
}  // namespace tvmgen

#endif  // TVMGEN_NPY_H_
