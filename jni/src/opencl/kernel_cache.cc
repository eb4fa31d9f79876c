// Building OpenCL programs through the kernel cache (see kernel_cache.h).
#include "kernel_cache.h"

namespace tvmgen {
namespace opencl {

std::string BuildLog(const Api& api, cl_program prog, cl_device_id dev) {
  size_t n = 0;
  api.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) api.GetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
  return log;
}

std::string ProgramBinary(const Api& api, cl_program prog, cl_device_id dev) {
  cl_uint n = 0;
  if (api.GetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof(n), &n, nullptr) != CL_SUCCESS || n == 0) return "";
  std::vector<cl_device_id> devs(n);
  api.GetProgramInfo(prog, CL_PROGRAM_DEVICES, n * sizeof(cl_device_id), devs.data(), nullptr);
  std::vector<size_t> sizes(n, 0);
  if (api.GetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, n * sizeof(size_t), sizes.data(), nullptr) != CL_SUCCESS) return "";
  std::vector<std::string> bins(n);
  std::vector<unsigned char*> ptrs(n, nullptr);
  for (cl_uint i = 0; i < n; ++i) {
    bins[i].resize(sizes[i]);
    ptrs[i] = sizes[i] ? reinterpret_cast<unsigned char*>(&bins[i][0]) : nullptr;
  }
  if (api.GetProgramInfo(prog, CL_PROGRAM_BINARIES, n * sizeof(unsigned char*), ptrs.data(), nullptr) != CL_SUCCESS) return "";
  for (cl_uint i = 0; i < n; ++i) {
    if (devs[i] == dev) return bins[i];
  }
  return "";
}

// Options for clBuildProgram: TVMGEN_OPENCL_BUILD_OPTIONS (e.g. "-cl-mad-enable"), else none. They
// are part of the cache key.
std::string CacheKey(const std::string& source_sha, int device_id) {
  return KernelCache::Key(source_sha, Workspace::Global().Probe(device_id), BuildOptions());
}

const std::string& BuildOptions() {
  static const std::string options = [] {
    const char* v = std::getenv("TVMGEN_OPENCL_BUILD_OPTIONS");
    return std::string(v ? v : "");
  }();
  return options;
}

cl_program BuildProgram(const std::string& source, int device_id, const std::string& what, bool* from_cache,
                        const std::string& load_dir, const std::string& known_key) {
  Workspace& w = Workspace::Global();
  const Api& api = cl::Get();
  DeviceInfo& dev = w.device(device_id);
  KernelCache& cache = KernelCache::Global();
  const std::string& options = BuildOptions();
  std::string key = known_key.empty() ? KernelCache::Key(Sha256Hex(source), dev, options) : known_key;
  std::string path;
  auto t0 = std::chrono::steady_clock::now();
  std::string binary = load_dir.empty() ? cache.Read(key, &path) : cache.ReadFrom(load_dir, key, &path);
  if (!binary.empty()) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(binary.data());
    size_t len = binary.size();
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    cl_program prog = api.CreateProgramWithBinary(w.context(), 1, &dev.id, &len, &b, &status, &err);
    if (err == CL_SUCCESS && status == CL_SUCCESS && prog != nullptr) {
      err = api.BuildProgram(prog, 1, &dev.id, options.c_str(), nullptr, nullptr);
      if (err == CL_SUCCESS) {
        cache.stats.hits++;
        cache.stats.load_us += static_cast<int64_t>(MsSince(t0) * 1000);
        if (from_cache) *from_cache = true;
        return prog;
      }
    }
    if (prog != nullptr) api.ReleaseProgram(prog);
    cache.Discard(path, std::string("the driver refused the binary: ") + ErrorName(err != CL_SUCCESS ? err : status));
  }
  cache.stats.misses++;
  const char* src = source.c_str();
  size_t len = source.size();
  cl_int err = CL_SUCCESS;
  cl_program prog = api.CreateProgramWithSource(w.context(), 1, &src, &len, &err);
  TVMGEN_CL_CHECK(err, "clCreateProgramWithSource");
  err = api.BuildProgram(prog, 1, &dev.id, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    std::string log = BuildLog(api, prog, dev.id);
    api.ReleaseProgram(prog);
    TVM_FFI_THROW(RuntimeError) << "OpenCL: building " << what << " for " << dev.name << " failed ("
                                << ErrorName(err) << "):\n" << log;
  }
  cache.stats.source_builds++;
  cache.stats.build_us += static_cast<int64_t>(MsSince(t0) * 1000);
  cache.Write(key, ProgramBinary(api, prog, dev.id));
  if (from_cache) *from_cache = false;
  return prog;
}

}  // namespace opencl
}  // namespace tvmgen
