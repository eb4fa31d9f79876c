// Reading the module blobs that the GPU backends embed in a model library (libtvmgen_opencl's
// TVM-exported OpenCL module, libtvmgen_vulkan's TVMGENVK module): little-endian PODs, strings as
// u64 length + bytes. Header-only, shared by the two loaders (src/opencl/opencl_registration.cc,
// src/vulkan/vulkan_module.cc).
#ifndef TVMGEN_COMMON_BLOB_READER_H_
#define TVMGEN_COMMON_BLOB_READER_H_

#include <tvm/ffi/error.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tvmgen {

class BlobReader {
 public:
  // `truncated`: the message of the RuntimeError thrown when the blob ends before a read (the backend's
  // words for "this module is not one I can read").
  BlobReader(const char* data, size_t size, const char* truncated) : p_(data), end_(data + size), truncated_(truncated) {}

  // The next n bytes (throws when fewer are left).
  const char* Take(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) TVM_FFI_THROW(RuntimeError) << truncated_;
    const char* q = p_;
    p_ += n;
    return q;
  }
  template <typename T>
  T Pod() {
    T v;
    std::memcpy(&v, Take(sizeof(T)), sizeof(T));
    return v;
  }
  // A u64 count of items of at least one byte each (throws when more than the bytes left).
  uint64_t Count() {
    uint64_t n = Pod<uint64_t>();
    if (n > static_cast<uint64_t>(end_ - p_)) Take(n);  // throws: more items than bytes left
    return n;
  }
  std::string Str() {
    uint64_t n = Count();
    return std::string(Take(n), n);
  }
  bool Done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
  const char* truncated_;
};

}  // namespace tvmgen

#endif  // TVMGEN_COMMON_BLOB_READER_H_
