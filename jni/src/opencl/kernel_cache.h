// The on-disk cache of compiled OpenCL programs (KernelCache), and building a program through it.
#ifndef TVMGEN_OPENCL_KERNEL_CACHE_H_
#define TVMGEN_OPENCL_KERNEL_CACHE_H_

#include "../common/disk_cache.h"
#include "opencl_common.h"

namespace tvmgen {
namespace opencl {

struct CacheStats {
  std::atomic<int64_t> hits{0}, misses{0}, corrupt{0}, writes{0}, write_errors{0}, source_builds{0};
  std::atomic<int64_t> build_us{0}, load_us{0};
  // Kernel launches that found their program not built yet (built it, or waited for a build thread): 0
  // after Model::Prepare, whose builds happen before the first run.
  std::atomic<int64_t> launch_waits{0};
  // Programs built by helper processes (build_helpers.h) this start, then loaded from the cache (among hits).
  std::atomic<int64_t> helper_builds{0};
};

// Compiled programs on disk (the format, directory and writing: ../common/disk_cache.h), one file per
// program source (a model's kernels, see opencl_module.cc) and device:
//   <dir>/<sha256(key)[:40]>.clbin, key = sha256(program source) + device name + driver version
//   + platform (OpenCL runtime) version + device version + build options + this library's version.
// File: "TVMGENCL" magic, u32 format, u64 key length, key, u64 binary length, binary, 32-byte
// sha256(binary). Anything that does not verify (or that the driver refuses) is deleted and
// rebuilt from source. Files are written to a temporary name and renamed: readers never see
// a half-written entry. Directory: set_cache_dir, else $TVMGEN_OPENCL_CACHE_DIR ("" turns it off), else
// $XDG_CACHE_HOME/tvmgen/opencl or ~/.cache/tvmgen/opencl (Android apps: tvmgen.opencl.set_cache_dir(
// context.getCacheDir() + ...)).
class KernelCache : public DiskCache<CacheStats> {
 public:
  static KernelCache& Global() {
    static KernelCache* c = new KernelCache();
    return *c;
  }

  KernelCache() : DiskCache({"TVMGENCL", ".clbin", "TVMGEN_OPENCL_CACHE_DIR", "opencl", "tvmgen-opencl", &LogOn}) {}

  static std::string Key(const std::string& source_sha, const DeviceInfo& d, const std::string& options) {
    return std::string(kVersion) + "\nsource-sha256=" + source_sha + "\ndevice=" + d.name + "\nvendor=" +
           d.vendor + "\ndriver=" + d.driver + "\ndevice-version=" + d.version + "\nplatform-version=" +
           d.platform_version + "\noptions=" + options + "\ntvm=" + TVM_VERSION + "\n";
  }

  std::string StatsJson() {
    std::ostringstream o;
    o << "{\"hits\": " << stats.hits << ", \"misses\": " << stats.misses << ", \"corrupt\": " << stats.corrupt
      << ", \"writes\": " << stats.writes << ", \"write_errors\": " << stats.write_errors
      << ", \"source_builds\": " << stats.source_builds << ", \"build_ms\": " << stats.build_us / 1000.0
      << ", \"load_ms\": " << stats.load_us / 1000.0 << ", \"launch_waits\": " << stats.launch_waits << ", \"helper_builds\": " << stats.helper_builds
      << ", \"dir\": \"" << JsonEscape(Dir()) << "\"}";
    return o.str();
  }

  void ResetStats() {
    stats.hits = stats.misses = stats.corrupt = stats.writes = stats.write_errors = stats.source_builds = 0;
    stats.build_us = stats.load_us = stats.launch_waits = stats.helper_builds = 0;
  }
};

// The driver's build log of `prog` for `dev`.
std::string BuildLog(const Api& api, cl_program prog, cl_device_id dev);

// The compiled binary of `prog` for `dev` ("" when the driver gives none).
std::string ProgramBinary(const Api& api, cl_program prog, cl_device_id dev);

// A built program for one source on one device: from the cache when it verifies and the driver
// accepts it (*from_cache set), otherwise compiled from source (and stored). load_dir: read the entry from
// there instead of the cache directory (the private directory of helper processes when the cache is off).
// key: CacheKey(source, device_id) when known already ("": computed here).
cl_program BuildProgram(const std::string& source, int device_id, const std::string& what, bool* from_cache = nullptr,
                        const std::string& load_dir = "", const std::string& key = "");

// The options given to clBuildProgram (TVMGEN_OPENCL_BUILD_OPTIONS), and the cache key of a source (its
// Sha256Hex) on a device (its description: no context needed, Workspace::Probe).
const std::string& BuildOptions();
std::string CacheKey(const std::string& source_sha, int device_id);

}  // namespace opencl
}  // namespace tvmgen

#endif  // TVMGEN_OPENCL_KERNEL_CACHE_H_
