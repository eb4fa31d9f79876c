// Loading a model library (runtime.cc's one use): from bytes through an in-memory file, and with TVM's
// per-constant scope log lines filtered. Header-only: the iOS app compiles runtime.cc alone.
#pragma once

#include <dlfcn.h>
#if defined(__linux__)  // also Android
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cerrno>
#include <cstring>
#include <iostream>
#include <streambuf>
#include <string>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace {

// TVM 0.27 logs a warning line for every texture-scoped constant an executable saves or loads ("Scope
// Loaded:global.texture-weight"): hundreds of lines per --gpu-family adreno model. This filter, installed
// on std::cerr (where TVM's LOG writes) while the library and its VM load, drops exactly those lines.
class ScopeLogFilter : public std::streambuf {
 public:
  ScopeLogFilter() : out_(std::cerr.rdbuf()) { std::cerr.rdbuf(this); }
  ~ScopeLogFilter() override {
    Flush();
    std::cerr.rdbuf(out_);
  }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    line_ += static_cast<char>(c);
    if (c == '\n') Flush();
    return c;
  }

 private:
  void Flush() {
    if (!line_.empty() && line_.find("Scope Loaded:") == std::string::npos &&
        line_.find("Scope Saving:") == std::string::npos) {
      out_->sputn(line_.data(), static_cast<std::streamsize>(line_.size()));
    }
    line_.clear();
  }
  std::streambuf* out_;
  std::string line_;
};

// A model library's bytes in an anonymous in-memory file (memfd_create: tmpfs, no path on any file system),
// for dlopen through /proc/self/fd/N. TVM builds its library module only from a path it dlopens itself
// (ffi.Module.load_from_file.so), so a path it is. Android's linker accepts a file on tmpfs whatever the
// app's linker namespace allows, which is what lets apps dlopen a memfd.
class MemoryLibrary {
 public:
  MemoryLibrary(const void* data, size_t size, const std::string& name) {
#if defined(__linux__)
    // The raw system call: bionic declares memfd_create() only from API 30, the kernel has had it since 3.17.
    fd_ = static_cast<int>(syscall(SYS_memfd_create, ("tvmgen:" + name).c_str(), 1u /* MFD_CLOEXEC */));
    if (fd_ < 0) {
      throw Error("cannot load the model library " + name + " from memory: memfd_create failed (" +
                  std::strerror(errno) + "; Linux kernels older than 3.17 lack it): load the artifact from a "
                  "directory instead");
    }
    const char* p = static_cast<const char*>(data);
    for (size_t left = size; left > 0;) {
      ssize_t n = write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int e = errno;
        close(fd_);
        throw Error("cannot load the model library " + name + " from memory: writing its " + std::to_string(size) +
                    " bytes to an in-memory file failed: " + std::strerror(e));
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
#else
    (void)data;
    (void)size;
    throw Error("loading the model library " + name + " from memory needs Linux or Android (memfd_create); "
                "load the artifact from a directory, or link the model into the app (iOS)");
#endif
  }
  ~MemoryLibrary() {
#if defined(__linux__)
    // glibc finds a library already loaded by the name it was opened with: while this one stays mapped (its
    // module still referenced, or not unloadable), keep the descriptor so that no later memfd gets the same
    // number, and the same path, and is taken for it.
    void* still = dlopen(path_.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (still != nullptr) {
      dlclose(still);
      return;
    }
    close(fd_);
#endif
  }
  MemoryLibrary(const MemoryLibrary&) = delete;
  MemoryLibrary& operator=(const MemoryLibrary&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace
}  // namespace tvmgen
