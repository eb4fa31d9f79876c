// SHA-256 (FIPS 180-4), for the OpenCL kernel cache keys and its integrity check.
#ifndef TVMGEN_OPENCL_SHA256_H_
#define TVMGEN_OPENCL_SHA256_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tvmgen {

/*! \brief The 32-byte digest of `data`. */
std::string Sha256(const void* data, size_t size);
/*! \brief The digest as 64 lowercase hex characters. */
std::string Sha256Hex(const void* data, size_t size);
inline std::string Sha256Hex(const std::string& s) { return Sha256Hex(s.data(), s.size()); }

}  // namespace tvmgen

#endif  // TVMGEN_OPENCL_SHA256_H_
