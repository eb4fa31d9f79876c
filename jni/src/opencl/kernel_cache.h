// The on-disk cache of compiled OpenCL programs (KernelCache), and building a program through it.
#ifndef TVMGEN_OPENCL_KERNEL_CACHE_H_
#define TVMGEN_OPENCL_KERNEL_CACHE_H_

#include "opencl_common.h"

namespace tvmgen {
namespace opencl {

struct CacheStats {
  std::atomic<int64_t> hits{0}, misses{0}, corrupt{0}, writes{0}, write_errors{0}, source_builds{0};
  std::atomic<int64_t> build_us{0}, load_us{0};
  // Kernel launches that found their program not built yet (built it, or waited for a build thread): 0
  // after Model::Prepare, whose builds happen before the first run.
  std::atomic<int64_t> launch_waits{0};
};

// Compiled programs on disk, one file per program source (a model's kernels, see opencl_module.cc) and device:
//   <dir>/<sha256(key)[:40]>.clbin, key = sha256(program source) + device name + driver version
//   + platform (OpenCL runtime) version + device version + build options + this library's version.
// File: "TVMGENCL" magic, u32 format, u64 key length, key, u64 binary length, binary, 32-byte
// sha256(binary). Anything that does not verify (or that the driver refuses) is deleted and
// rebuilt from source. Files are written to a temporary name and renamed: readers never see
// a half-written entry.
class KernelCache {
 public:
  static KernelCache& Global() {
    static KernelCache* c = new KernelCache();
    return *c;
  }

  void SetDir(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dir_ = dir;
    explicit_ = true;
  }

  // The cache directory ("" when caching is off).
  std::string Dir() {
    std::lock_guard<std::mutex> lock(mu_);
    if (explicit_) return dir_;
    if (const char* env = std::getenv("TVMGEN_OPENCL_CACHE_DIR")) return env;  // "" turns it off
    if (const char* x = std::getenv("XDG_CACHE_HOME")) {
      if (*x) return std::string(x) + "/tvmgen/opencl";
    }
    if (const char* h = std::getenv("HOME")) {
      if (*h) return std::string(h) + "/.cache/tvmgen/opencl";
    }
    return "";  // Android apps: call tvmgen.opencl.set_cache_dir(context.getCacheDir() + ...)
  }

  static std::string Key(const std::string& source_sha, const DeviceInfo& d, const std::string& options) {
    return std::string(kVersion) + "\nsource-sha256=" + source_sha + "\ndevice=" + d.name + "\nvendor=" +
           d.vendor + "\ndriver=" + d.driver + "\ndevice-version=" + d.version + "\nplatform-version=" +
           d.platform_version + "\noptions=" + options + "\ntvm=" + TVM_VERSION + "\n";
  }

  std::string PathFor(const std::string& dir, const std::string& key) {
    return dir + "/" + Sha256Hex(key).substr(0, 40) + ".clbin";
  }

  // The binary stored for key, or "" (a miss, or an entry that failed verification: deleted).
  std::string Read(const std::string& key, std::string* path_out) {
    std::string dir = Dir();
    if (dir.empty()) return "";
    std::string path = PathFor(dir, key);
    *path_out = path;
    std::ifstream f(path, std::ios::binary);
    if (!f) return "";
    std::stringstream ss;
    ss << f.rdbuf();
    std::string data = ss.str();
    std::string why;
    std::string binary = Parse(data, key, &why);
    if (binary.empty()) {
      Discard(path, why);
      return "";
    }
    return binary;
  }

  void Discard(const std::string& path, const std::string& why) {
    stats.corrupt++;
    std::remove(path.c_str());
    if (LogOn()) std::fprintf(stderr, "tvmgen-opencl: cache entry %s is unusable (%s): rebuilt\n", path.c_str(), why.c_str());
  }

  void Write(const std::string& key, const std::string& binary) {
    std::string dir = Dir();
    if (dir.empty() || binary.empty()) return;
    if (!MakeDirs(dir)) {
      stats.write_errors++;
      if (LogOn()) std::fprintf(stderr, "tvmgen-opencl: cannot create cache directory %s\n", dir.c_str());
      return;
    }
    std::string path = PathFor(dir, key);
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    std::string blob = "TVMGENCL";
    AppendU32(&blob, 1);
    AppendU64(&blob, key.size());
    blob += key;
    AppendU64(&blob, binary.size());
    blob += binary;
    blob += Sha256(binary.data(), binary.size());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(blob.data(), static_cast<std::streamsize>(blob.size()));
      if (!f) {
        stats.write_errors++;
        std::remove(tmp.c_str());
        return;
      }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      stats.write_errors++;
      std::remove(tmp.c_str());
      return;
    }
    stats.writes++;
  }

  std::string StatsJson() {
    std::ostringstream o;
    o << "{\"hits\": " << stats.hits << ", \"misses\": " << stats.misses << ", \"corrupt\": " << stats.corrupt
      << ", \"writes\": " << stats.writes << ", \"write_errors\": " << stats.write_errors
      << ", \"source_builds\": " << stats.source_builds << ", \"build_ms\": " << stats.build_us / 1000.0
      << ", \"load_ms\": " << stats.load_us / 1000.0 << ", \"launch_waits\": " << stats.launch_waits
      << ", \"dir\": \"" << JsonEscape(Dir()) << "\"}";
    return o.str();
  }

  void ResetStats() {
    stats.hits = stats.misses = stats.corrupt = stats.writes = stats.write_errors = stats.source_builds = 0;
    stats.build_us = stats.load_us = stats.launch_waits = 0;
  }

  CacheStats stats;

 private:
  static void AppendU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
  static void AppendU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

  static std::string Parse(const std::string& d, const std::string& key, std::string* why) {
    size_t pos = 0;
    auto take = [&](size_t n) -> const char* {
      if (d.size() - pos < n) return nullptr;
      const char* p = d.data() + pos;
      pos += n;
      return p;
    };
    const char* magic = take(8);
    if (!magic || std::memcmp(magic, "TVMGENCL", 8) != 0) return *why = "bad magic", "";
    const char* fmt = take(4);
    uint32_t format = 0;
    if (fmt) std::memcpy(&format, fmt, 4);
    if (format != 1) return *why = "unknown format", "";
    uint64_t klen = 0;
    const char* p = take(8);
    if (!p) return *why = "truncated", "";
    std::memcpy(&klen, p, 8);
    if (klen > d.size()) return *why = "truncated", "";
    const char* k = take(klen);
    if (!k || std::string(k, klen) != key) return *why = "stale key", "";
    uint64_t blen = 0;
    p = take(8);
    if (!p) return *why = "truncated", "";
    std::memcpy(&blen, p, 8);
    if (blen == 0 || blen > d.size()) return *why = "truncated", "";
    const char* b = take(blen);
    const char* sum = take(32);
    if (!b || !sum) return *why = "truncated", "";
    if (pos != d.size()) return *why = "trailing bytes", "";
    if (Sha256(b, blen) != std::string(sum, 32)) return *why = "checksum mismatch", "";
    return std::string(b, blen);
  }

  static bool MakeDirs(const std::string& dir) {
    std::string cur;
    for (size_t i = 0; i <= dir.size(); ++i) {
      if (i == dir.size() || dir[i] == '/') {
        if (!cur.empty()) mkdir(cur.c_str(), 0755);
      }
      if (i < dir.size()) cur += dir[i];
    }
    struct stat st;
    return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  std::mutex mu_;
  std::string dir_;
  bool explicit_ = false;
};

// The driver's build log of `prog` for `dev`.
std::string BuildLog(const Api& api, cl_program prog, cl_device_id dev);

// The compiled binary of `prog` for `dev` ("" when the driver gives none).
std::string ProgramBinary(const Api& api, cl_program prog, cl_device_id dev);

// A built program for one source on one device: from the cache when it verifies and the driver
// accepts it (*from_cache set), otherwise compiled from source (and stored).
cl_program BuildProgram(const std::string& source, int device_id, const std::string& what, bool* from_cache = nullptr);

}  // namespace opencl
}  // namespace tvmgen

#endif  // TVMGEN_OPENCL_KERNEL_CACHE_H_
