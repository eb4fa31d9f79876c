// The pipeline cache on disk. Each kernel module's pipelines are created through one VkPipelineCache,
// which persists across processes: <dir>/<sha256(key)[:40]>.vkpc, key = sha256(the module's SPIR-V payload)
// + device name, vendor and device ids, driver version, pipelineCacheUUID + this format's version; the file
// holds "TVMGENVC", u32 format, u64 key length, key, u64 data length, vkGetPipelineCacheData's bytes, and
// the data's sha256. An entry that does not verify is deleted and the pipelines built from SPIR-V; a new
// entry is written (temporary name, then rename) once every pipeline of the module exists. Directory:
// tvmgen.vulkan.set_cache_dir / TVMGenVulkanSetCacheDir (apps), else $TVMGEN_VULKAN_CACHE_DIR ("" turns
// it off), else $XDG_CACHE_HOME/tvmgen/vulkan or ~/.cache/tvmgen/vulkan. TVMGEN_VULKAN_LOG=1 prints the
// cache's counters at exit ("tvmgen-vulkan: cache {...}").
#pragma once

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include "../common/disk_cache.h"
#include "../common/json.h"
#include "vulkan_common.h"

namespace tvmgen {
namespace vulkan {

struct CacheStats {
  // hits / misses: modules whose pipeline cache file was (not) found and valid; cached / built: pipelines
  // created with / without one; corrupt: entries deleted; create_ms: the drivers' pipeline creation.
  std::atomic<int64_t> hits{0}, misses{0}, corrupt{0}, writes{0}, write_errors{0}, cached{0}, built{0};
  std::atomic<int64_t> create_us{0}, launch_waits{0};
};

// The cache directory's entries: ../common/disk_cache.h (the file format and directory described at the top).
class PipelineCacheDir : public DiskCache<CacheStats> {
 public:
  static PipelineCacheDir& Global() {
    static PipelineCacheDir* c = new PipelineCacheDir();
    return *c;
  }
  PipelineCacheDir() : DiskCache({"TVMGENVC", ".vkpc", "TVMGEN_VULKAN_CACHE_DIR", "vulkan", "tvmgen-vulkan", &LogOn}) {}

  static std::string Key(const std::string& payload_sha, const VkPhysicalDeviceProperties& p) {
    std::ostringstream o;
    o << "tvmgen-vulkan-pipeline-cache 1\npayload-sha256=" << payload_sha << "\ndevice=" << p.deviceName
      << "\nvendor=" << p.vendorID << "\ndevice-id=" << p.deviceID << "\ndriver=" << p.driverVersion << "\nuuid=";
    for (uint8_t b : p.pipelineCacheUUID) o << static_cast<int>(b) << ".";
    o << "\n";
    return o.str();
  }

  std::string StatsJson() {
    std::ostringstream o;
    // source_builds: as the OpenCL cache's counters name pipelines built without a cache (benchmarks/gpu.py)
    o << "{\"hits\": " << stats.hits << ", \"misses\": " << stats.misses << ", \"corrupt\": " << stats.corrupt
      << ", \"writes\": " << stats.writes << ", \"write_errors\": " << stats.write_errors
      << ", \"pipelines_cached\": " << stats.cached << ", \"source_builds\": " << stats.built
      << ", \"create_ms\": " << stats.create_us / 1000.0 << ", \"launch_waits\": " << stats.launch_waits
      << ", \"dir\": \"" << JsonEscape(Dir()) << "\"}";
    return o.str();
  }
};

}  // namespace vulkan
}  // namespace tvmgen
