// Helper processes that build OpenCL programs into the kernel cache (see build_helpers.h), and their main.
#include "build_helpers.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "kernel_cache.h"

extern char** environ;

namespace tvmgen {
namespace opencl {

namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

bool Contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// tvmgen-clbuild beside this library or in ../bin (an installed runtime: lib/ and bin/), unless
// TVMGEN_OPENCL_CLBUILD names it. "" when none is there.
std::string FindExecutable() {
  if (const char* v = std::getenv("TVMGEN_OPENCL_CLBUILD")) return v;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&HelperProcesses), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string lib = info.dli_fname;
  size_t slash = lib.rfind('/');
  std::string dir = slash == std::string::npos ? "." : lib.substr(0, slash);
  for (const std::string& c : {dir + "/tvmgen-clbuild", dir + "/../bin/tvmgen-clbuild"}) {
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return dir + "/../bin/tvmgen-clbuild";  // absent: posix_spawn's error names it
}

bool WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  return static_cast<bool>(f);
}

}  // namespace

int PotentialHelperProcesses() {
#ifdef __ANDROID__
  return 0;  // an app cannot portably start processes that use the GPU
#else
  if (const char* v = std::getenv("TVMGEN_OPENCL_BUILD_PROCESSES")) {
    if (*v) return std::max(0, std::atoi(v));
  }
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::min(5, cores - 1);
#endif
}

bool HelpersLikelyEarly() {
  if (PotentialHelperProcesses() <= 0 || EnvInt("TVMGEN_OPENCL_HELPERS_EARLY", 1) == 0) return false;
  const char* v = std::getenv("TVMGEN_OPENCL_BUILD_PROCESSES");
  return (v && *v) || access("/proc/driver/nvidia/version", F_OK) == 0;
}

int HelperProcesses(const DeviceInfo& dev, const std::string& platform) {
  const char* v = std::getenv("TVMGEN_OPENCL_BUILD_PROCESSES");
  // NVIDIA's OpenCL compiler runs one build at a time per process, however many threads call it, while
  // builds in separate processes run side by side (docs/benchmarks.md, the GPU's cold start).
  bool serializes = Contains(platform, "NVIDIA") || Contains(dev.vendor, "NVIDIA");
  return serializes || (v && *v) ? PotentialHelperProcesses() : 0;
}

size_t KernelWeight(size_t definition_bytes) { return definition_bytes + 16 * 1024; }

size_t UnrolledBytes(const std::string& def) {
  if (def.find("#pragma unroll") == std::string::npos) return def.size();
  // brace depth -> the multiplier of the loop opened there; pending: the count of the loop after a pragma
  std::vector<std::pair<int, size_t>> loops;
  size_t mult = 1, total = 0, pending = 0;
  int depth = 0;
  size_t pos = 0;
  while (pos < def.size()) {
    size_t eol = def.find('\n', pos);
    if (eol == std::string::npos) eol = def.size();
    const std::string line = def.substr(pos, eol - pos);
    pos = eol + 1;
    size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line.compare(first, 14, "#pragma unroll") == 0) {
      pending = 1;  // its count comes with the for line
      continue;
    }
    total += (line.size() + 1) * mult;
    size_t lt = line.find(" < ");
    if (pending && first != std::string::npos && line.compare(first, 5, "for (") == 0 && lt != std::string::npos) {
      pending = std::max<size_t>(1, std::strtoul(line.c_str() + lt + 3, nullptr, 10));
    } else {
      pending = 0;
    }
    for (char c : line) {
      if (c == '{') {
        ++depth;
        if (pending > 1) {
          loops.emplace_back(depth, mult);
          mult *= pending;
        }
        pending = 0;
      } else if (c == '}') {
        if (!loops.empty() && loops.back().first == depth) {
          mult = loops.back().second;
          loops.pop_back();
        }
        --depth;
      }
    }
  }
  return total;
}

size_t GroupWeight() {
  static size_t w = static_cast<size_t>(std::max(1, EnvInt("TVMGEN_OPENCL_GROUP_KB", 192))) * 1024;
  return w;
}

size_t MaxHelperPrograms() {
  static size_t n = static_cast<size_t>(std::max(3, EnvInt("TVMGEN_OPENCL_MAX_PROGRAMS", 12)));
  return n;
}

bool HelperBuilds::Start(const std::vector<const std::string*>& sources, int helpers, int device_id,
                         const std::string& cache_dir, bool log, std::string* why) {
  exe_ = FindExecutable();
  const char* t = std::getenv("TMPDIR");
  std::string pattern = std::string(t && *t ? t : "/tmp") + "/tvmgen-clbuild-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    *why = "cannot create a temporary directory " + pattern + ": " + std::strerror(errno);
    return false;
  }
  tmp_ = buf.data();
  load_dir_ = cache_dir.empty() ? tmp_ : cache_dir;
  if (!disk_cache::MakeDirs(load_dir_)) {
    *why = "cannot create the kernel cache directory " + load_dir_;
    return false;
  }
  std::vector<std::string> args = {exe_, "--cache-dir", load_dir_, "--device", std::to_string(device_id), "--options"};
  const char* o = std::getenv("TVMGEN_OPENCL_BUILD_OPTIONS");
  args.push_back(o ? o : "");
  if (log) args.push_back("--log");
  for (size_t j = 0; j < sources.size(); ++j) {
    if (!WriteFile(Source(j), *sources[j])) {
      *why = "cannot write " + Source(j);
      return false;
    }
    args.push_back(Source(j));
  }
  // This process's environment (the OpenCL library, the driver's settings and caches) less TVMGEN_OPENCL_LOG:
  // the helpers' own log lines (platform, cache counters) would read as this process's.
  std::vector<char*> env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "TVMGEN_OPENCL_LOG=", 18) != 0) env.push_back(*e);
  }
  env.push_back(nullptr);
  // Helper k opens its device once helper k-1 has: NVIDIA makes the contexts of processes that open the device
  // together all at once, about 110-150 ms per process (5 helpers: none ready before ~0.6 s); one after the
  // other, the first is ready at ~0.13 s and builds while the next ones start (discrete NVIDIA GPUs: cold first
  // runs 9-25% shorter by medians, docs/benchmarks.md). TVMGEN_OPENCL_HELPERS_STAGGER=0: all at once.
  const bool stagger = EnvInt("TVMGEN_OPENCL_HELPERS_STAGGER", 1) != 0;
  for (int k = 0; k < helpers; ++k) {
    std::vector<std::string> mine = args;  // helper k's: the chain's files before the sources
    if (stagger && k + 1 < helpers) mine.insert(mine.begin() + 1, {"--ready-file", tmp_ + "/ready" + std::to_string(k)});
    if (stagger && k > 0) mine.insert(mine.begin() + 1, {"--after", tmp_ + "/ready" + std::to_string(k - 1)});
    std::vector<char*> argv;
    for (std::string& a : mine) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      *why = std::string("pipe: ") + std::strerror(errno);
      return !pids_.empty();
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);  // the reports; stderr stays: its errors show
    pid_t pid = 0;
    int err = posix_spawn(&pid, exe_.c_str(), &actions, nullptr, argv.data(), env.data());
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (err != 0) {
      close(fds[0]);
      *why = "cannot start " + exe_ + ": " + std::strerror(err);
      return !pids_.empty();
    }
    pids_.push_back(pid);
    pipes_.push_back(fds[0]);
    waited_.push_back(false);
  }
  return true;
}

bool HelperBuilds::Claim(size_t j) {
  int fd = open((Source(j) + ".claim").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

std::string HelperBuilds::Follow(size_t k, const std::function<void()>& ready,
                                 const std::function<void(size_t)>& claimed, const std::function<void(size_t)>& stored) {
  if (k >= pids_.size()) return "it was not started";
  std::string pending;
  char chunk[256];
  for (;;) {
    ssize_t n = read(pipes_[k], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(chunk, static_cast<size_t>(n));
    size_t eol;
    while ((eol = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (line == "ready") ready();
      if (line.rfind("claim ", 0) == 0) claimed(std::strtoul(line.c_str() + 6, nullptr, 10));
      if (line.rfind("done ", 0) == 0) stored(std::strtoul(line.c_str() + 5, nullptr, 10));
    }
  }
  close(pipes_[k]);
  pipes_[k] = -1;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pids_[k], &status, 0);
  } while (r < 0 && errno == EINTR);
  waited_[k] = true;
  if (r < 0) return "";  // e.g. SIGCHLD ignored by the app: its reports tell
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM && stopping_) return "";  // nothing was left to build
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

void HelperBuilds::StopAll() {
  stopping_ = true;
  for (size_t k = 0; k < pids_.size(); ++k) {
    if (!waited_[k]) kill(pids_[k], SIGTERM);
  }
}

HelperBuilds::~HelperBuilds() {
  for (size_t k = 0; k < pids_.size(); ++k) {
    if (pipes_[k] >= 0) close(pipes_[k]);
    if (waited_[k]) continue;
    kill(pids_[k], SIGTERM);
    int status;
    while (waitpid(pids_[k], &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (tmp_.empty()) return;
  if (DIR* d = opendir(tmp_.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") std::remove((tmp_ + "/" + n).c_str());
    }
    closedir(d);
  }
  rmdir(tmp_.c_str());
}

}  // namespace opencl
}  // namespace tvmgen

// ------------------------------------------------------------------ tvmgen-clbuild
// Reads only the source files it is given and writes only into the cache directory (KernelCache::Write:
// a temporary name there, renamed into place).
extern "C" __attribute__((visibility("default"))) int TVMGenOpenCLBuildMain(int argc, char** argv) {
  using namespace tvmgen::opencl;  // NOLINT
  std::string dir, options;
  int device = 0;
  std::vector<std::string> files;
  std::string after, ready_file;
  bool have_dir = false, have_options = false, log = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cache-dir" && i + 1 < argc) {
      dir = argv[++i];
      have_dir = true;
    } else if (a == "--device" && i + 1 < argc) {
      device = std::atoi(argv[++i]);
    } else if (a == "--options" && i + 1 < argc) {
      options = argv[++i];
      have_options = true;
    } else if (a == "--log") {
      log = true;
    } else if (a == "--after" && i + 1 < argc) {
      after = argv[++i];
    } else if (a == "--ready-file" && i + 1 < argc) {
      ready_file = argv[++i];
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "tvmgen-clbuild: unknown option %s\n", a.c_str());
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (!have_dir || dir.empty() || !have_options || files.empty()) {
    std::fprintf(stderr,
                 "usage: tvmgen-clbuild --cache-dir DIR --device N --options OPTIONS [--log] [--after FILE]\n"
                 "                      [--ready-file FILE] SOURCE.cl...\n"
                 "  builds the OpenCL sources it claims (SOURCE.cl.claim) for device N and stores their binaries in\n"
                 "  tvmgen's kernel cache DIR (started by libtvmgen_opencl, see TVMGEN_OPENCL_BUILD_PROCESSES);\n"
                 "  --after: opens the device once FILE exists (at most 3 s of waiting); --ready-file: created once\n"
                 "  the device is open\n");
    return 2;
  }
  setenv("TVMGEN_OPENCL_BUILD_OPTIONS", options.c_str(), 1);  // the key's options: the parent's
  KernelCache& cache = KernelCache::Global();
  cache.SetDir(dir);
  auto t0 = std::chrono::steady_clock::now();
  try {
    // --after FILE: the device opened once FILE exists (the previous helper's; at most 3 s of waiting)
    for (int waited = 0; !after.empty() && access(after.c_str(), F_OK) != 0 && waited < 3000; ++waited) {
      usleep(1000);
    }
    Workspace::Global().device(device);  // the context first: claim only what can be built at once
    if (!ready_file.empty()) close(open(ready_file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    if (log) std::fprintf(stderr, "tvmgen-clbuild[%d]: context in %.1f ms\n", static_cast<int>(getpid()), MsSince(t0));
    std::printf("ready\n");
    std::fflush(stdout);
    for (size_t j = 0; j < files.size(); ++j) {
      const std::string& f = files[j];
      int fd = open((f + ".claim").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
      if (fd < 0) continue;  // taken
      close(fd);
      std::printf("claim %zu\n", j);
      std::fflush(stdout);
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "tvmgen-clbuild: cannot read %s\n", f.c_str());
        return 1;
      }
      std::stringstream ss;
      ss << in.rdbuf();
      auto t1 = std::chrono::steady_clock::now();
      int64_t stored = cache.stats.writes + cache.stats.hits;
      cl_program p = BuildProgram(ss.str(), device, "the program in " + f);
      tvmgen::cl::Get().ReleaseProgram(p);
      if (cache.stats.writes + cache.stats.hits == stored) {
        std::fprintf(stderr, "tvmgen-clbuild: cannot store the binary of %s in %s (%s)\n", f.c_str(), dir.c_str(),
                     cache.stats.write_errors ? "write error" : "the driver gave no binary");
        return 1;
      }
      if (log) {
        std::fprintf(stderr, "tvmgen-clbuild[%d]: program %zu built in %.1f ms (at %.1f ms)\n",
                     static_cast<int>(getpid()), j, MsSince(t1), MsSince(t0));
      }
      std::printf("done %zu\n", j);
      std::fflush(stdout);
    }
  } catch (const tvm::ffi::Error& e) {
    std::fprintf(stderr, "tvmgen-clbuild: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
