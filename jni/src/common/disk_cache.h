// The on-disk cache of compiled GPU code, one file per key, shared by libtvmgen_opencl's program
// binaries (src/opencl/kernel_cache.h, "TVMGENCL", .clbin) and libtvmgen_vulkan's pipeline caches
// (src/vulkan/pipeline_cache.h, "TVMGENVC", .vkpc). Header-only; each backend supplies its names, its
// key and its counters.
//
//   <dir>/<sha256(key)[:40]><extension>
// File: 8-byte magic, u32 format (1), u64 key length, key, u64 data length, data, 32-byte sha256(data)
// (host byte order). An entry that does not verify is deleted (Discard: counted in stats.corrupt, logged
// when the backend's log is on) and Read reports a miss. Entries are written to a temporary name and
// renamed: readers never see a half-written one.
//
// Directory: SetDir (apps), else $<dir_env> ("" turns caching off), else $XDG_CACHE_HOME/tvmgen/<subdir>
// or ~/.cache/tvmgen/<subdir>, else none (caching off).
#ifndef TVMGEN_COMMON_DISK_CACHE_H_
#define TVMGEN_COMMON_DISK_CACHE_H_

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include "../opencl/sha256.h"

namespace tvmgen {

struct DiskCacheConfig {
  const char* magic;       // 8 characters, the files' first bytes
  const char* extension;   // of the entries' file names, with its dot
  const char* dir_env;     // the environment variable naming the directory
  const char* subdir;      // under $XDG_CACHE_HOME/tvmgen or ~/.cache/tvmgen
  const char* log_prefix;  // of the lines printed to stderr
  bool (*log_on)();        // whether to print them
};

namespace disk_cache {

inline void AppendU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
inline void AppendU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

// A cache file's bytes for key and data.
inline std::string Encode(const char* magic, const std::string& key, const std::string& data) {
  std::string blob(magic, 8);
  AppendU32(&blob, 1);
  AppendU64(&blob, key.size());
  blob += key;
  AppendU64(&blob, data.size());
  blob += data;
  blob += Sha256(data.data(), data.size());
  return blob;
}

// The data in cache file d when it verifies and was stored for key, else "" and *why.
inline std::string Parse(const char* magic, const std::string& d, const std::string& key, std::string* why) {
  size_t pos = 0;
  auto take = [&](size_t n) -> const char* {
    if (d.size() - pos < n) return nullptr;
    const char* p = d.data() + pos;
    pos += n;
    return p;
  };
  const char* m = take(8);
  if (!m || std::memcmp(m, magic, 8) != 0) return *why = "bad magic", "";
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
  uint64_t dlen = 0;
  p = take(8);
  if (!p) return *why = "truncated", "";
  std::memcpy(&dlen, p, 8);
  if (dlen == 0 || dlen > d.size()) return *why = "truncated", "";
  const char* data = take(dlen);
  const char* sum = take(32);
  if (!data || !sum) return *why = "truncated", "";
  if (pos != d.size()) return *why = "trailing bytes", "";
  if (Sha256(data, dlen) != std::string(sum, 32)) return *why = "checksum mismatch", "";
  return std::string(data, dlen);
}

// mkdir -p dir; whether it is a directory now.
inline bool MakeDirs(const std::string& dir) {
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

}  // namespace disk_cache

// Stats: the backend's counters; it has (at least) std::atomic<int64_t> corrupt, writes, write_errors.
template <typename Stats>
class DiskCache {
 public:
  explicit DiskCache(const DiskCacheConfig& config) : config_(config) {}

  void SetDir(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dir_ = dir;
    explicit_ = true;
  }

  // The cache directory ("" when caching is off).
  std::string Dir() {
    std::lock_guard<std::mutex> lock(mu_);
    if (explicit_) return dir_;
    if (const char* env = std::getenv(config_.dir_env)) return env;  // "" turns it off
    if (const char* x = std::getenv("XDG_CACHE_HOME")) {
      if (*x) return std::string(x) + "/tvmgen/" + config_.subdir;
    }
    if (const char* h = std::getenv("HOME")) {
      if (*h) return std::string(h) + "/.cache/tvmgen/" + config_.subdir;
    }
    return "";  // Android apps: the backend's set_cache_dir (context.getCacheDir() + ...)
  }

  std::string PathFor(const std::string& dir, const std::string& key) const {
    return dir + "/" + Sha256Hex(key).substr(0, 40) + config_.extension;
  }

  // The data stored for key, or "" (a miss, or an entry that failed verification: deleted). *path_out:
  // the entry's path, when there is a cache directory.
  std::string Read(const std::string& key, std::string* path_out) { return ReadFrom(Dir(), key, path_out); }

  // The same, from directory dir (OpenCL: the binaries its helper processes built, see
  // src/opencl/build_helpers.h, when the cache is off and they wrote to a private directory).
  std::string ReadFrom(const std::string& dir, const std::string& key, std::string* path_out) {
    if (dir.empty()) return "";
    std::string path = PathFor(dir, key);
    *path_out = path;
    std::ifstream f(path, std::ios::binary);
    if (!f) return "";
    std::stringstream ss;
    ss << f.rdbuf();
    std::string why;
    std::string data = disk_cache::Parse(config_.magic, ss.str(), key, &why);
    if (data.empty()) Discard(path, why);
    return data;
  }

  // Deletes an unusable entry (one that does not verify, or whose data the driver refused).
  void Discard(const std::string& path, const std::string& why) {
    stats.corrupt++;
    std::remove(path.c_str());
    if (config_.log_on()) {
      std::fprintf(stderr, "%s: cache entry %s is unusable (%s): rebuilt\n", config_.log_prefix, path.c_str(), why.c_str());
    }
  }

  void Write(const std::string& key, const std::string& data) {
    std::string dir = Dir();
    if (dir.empty() || data.empty()) return;
    if (!disk_cache::MakeDirs(dir)) {
      stats.write_errors++;
      if (config_.log_on()) std::fprintf(stderr, "%s: cannot create cache directory %s\n", config_.log_prefix, dir.c_str());
      return;
    }
    std::string path = PathFor(dir, key);
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    std::string blob = disk_cache::Encode(config_.magic, key, data);
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

  Stats stats;

 private:
  const DiskCacheConfig config_;
  std::mutex mu_;
  std::string dir_;
  bool explicit_ = false;
};

}  // namespace tvmgen

#endif  // TVMGEN_COMMON_DISK_CACHE_H_
