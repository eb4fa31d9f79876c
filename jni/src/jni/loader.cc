// libtvmgen_jni: what System.loadLibrary("tvmgen_jni") loads (from org.tvmgen.NativeLib). It depends
// on nothing but libc and libdl; its JNI_OnLoad loads the real bridge (libtvmgen_jni_bridge:
// model_bridge.cc, ffi_bridge.cc and jni_util.cc, linked with the tvmgen and TVM runtimes) and keeps
// the JVM's signal handlers intact while doing so.
//
// Why: libtvm_ffi (as shipped in the apache-tvm-ffi wheels, TVM_FFI_BACKTRACE_ON_SEGFAULT=ON)
// installs a SIGSEGV handler from a library constructor (std::signal, unconditionally) that prints
// a backtrace and kills the process. A JVM uses SIGSEGV for its own purposes (HotSpot: implicit
// null checks, safepoint polls, stack banging), so once that handler replaces the JVM's, the first
// of those faults in JIT-compiled Java code aborts the JVM ("!!!!!!! Segfault encountered !!!!!!!").
// The constructor runs inside dlopen, before any JNI_OnLoad of a library that links it.
//
// So the loader, which links none of it:
//  1. loads libtvm_ffi through libtvmgen_jni_sigguard (signal_guard.cc, glibc Linux), which
//     redirects libtvm_ffi's `signal` call after relocation and before its constructor runs: the
//     JVM's handler stays installed throughout. Without the guard (other platforms, or the library
//     missing) libtvm_ffi is loaded on its own, and its handler is installed from its constructor
//     until step 2, about a millisecond (the wheel's libtvm_ffi: 1.1 ms to load). A Java thread's
//     SIGSEGV in that window aborts the JVM, and -Xcheck:jni's signal check, which HotSpot's
//     watcher thread runs every 10 ms, reports "SIGSEGV handler modified!" when it samples inside
//     it (about 1 run in 30 measured, 7 of 200).
//  2. saves the handlers first and puts back any that changed after each dlopen (the safety net
//     for step 1's fallback, and for any other library constructor).
//  3. loads the bridge, whose libtvm_ffi dependency resolves to the copy already loaded (same
//     soname), and restores again.
// On Android, ART's sigchain already shields its handlers (and tvmgen builds libtvm_ffi there
// without the crash handler); restoring is harmless.
#include <dlfcn.h>
#include <jni.h>

#include <csignal>
#include <cstring>
#include <string>

namespace {

// The signals a JVM handles itself (HotSpot on Linux: SEGV, BUS, ILL, FPE, PIPE, XFSZ; TRAP on some CPUs).
const int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGPIPE, SIGXFSZ, SIGTRAP};
constexpr int kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);
#if defined(__APPLE__)
const char* kBridgeName = "libtvmgen_jni_bridge.dylib";
const char* kFfiName = "libtvm_ffi.dylib";
#else
const char* kBridgeName = "libtvmgen_jni_bridge.so";
const char* kFfiName = "libtvm_ffi.so";
#endif
#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
// libtvm_ffi loaded through signal_guard.cc, whose constructor-free IFUNC hook keeps libtvm_ffi's
// constructor from replacing any handler at all (built for glibc Linux only).
const char* kGuardName = "libtvmgen_jni_sigguard.so";
#else
const char* kGuardName = nullptr;
#endif

using RegisterFn = jint (*)(JNIEnv*);
using UnregisterFn = void (*)(JNIEnv*);
void* g_bridge = nullptr;

void ThrowLinkError(JNIEnv* env, const std::string& message) {
  if (env->ExceptionCheck()) return;
  jclass cls = env->FindClass("java/lang/UnsatisfiedLinkError");
  if (cls != nullptr) env->ThrowNew(cls, message.c_str());
}

// The directory this library was loaded from, with a trailing '/', or "" if unknown.
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

bool SameAction(const struct sigaction& a, const struct sigaction& b) {
  bool a_info = (a.sa_flags & SA_SIGINFO) != 0, b_info = (b.sa_flags & SA_SIGINFO) != 0;
  if (a_info != b_info) return false;
  return a_info ? a.sa_sigaction == b.sa_sigaction : a.sa_handler == b.sa_handler;
}

// dlopen the first of `paths` that loads (RTLD_NOW | RTLD_LOCAL); errors go to *errors.
void* OpenFirst(const std::string* paths, int n, std::string* errors) {
  for (int i = 0; i < n; ++i) {
    if (paths[i].empty()) continue;
    void* handle = dlopen(paths[i].c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return handle;
    if (errors != nullptr) *errors += std::string(errors->empty() ? "" : "; ") + dlerror();
  }
  return nullptr;
}

// Puts back every handler in `saved` that is no longer installed.
void RestoreHandlers(const struct sigaction* saved, const bool* have) {
  for (int i = 0; i < kNumSignals; ++i) {
    struct sigaction now;
    if (have[i] && sigaction(kSignals[i], nullptr, &now) == 0 && !SameAction(now, saved[i])) {
      sigaction(kSignals[i], &saved[i], nullptr);
    }
  }
}

}  // namespace

extern "C" JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void*) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;

  struct sigaction saved[kNumSignals];
  bool have[kNumSignals];
  for (int i = 0; i < kNumSignals; ++i) have[i] = sigaction(kSignals[i], nullptr, &saved[i]) == 0;

  // Beside this library first (desktop: the build or install directory), then by name (an Android
  // app's native library directory, LD_LIBRARY_PATH, this library's RUNPATH, which is the bridge's).
  // libtvm_ffi first, through the guard where there is one (see the top): the bridge's dependency on
  // it then resolves to this copy (same soname). If it is not found this way, the bridge's own search
  // finds it below. None is ever closed: the TVM runtime cannot be unloaded safely.
  std::string dir = OwnDirectory();
  void* ffi = nullptr;
  if (kGuardName != nullptr) {  // libtvm_ffi through the guard: its handler is never installed
    const std::string guard_paths[] = {dir.empty() ? "" : dir + kGuardName, kGuardName};
    ffi = OpenFirst(guard_paths, 2, nullptr);
  }
  if (ffi == nullptr) {  // else on its own: the window is its constructors' run, about a millisecond
    const std::string ffi_paths[] = {dir.empty() ? "" : dir + kFfiName, kFfiName};
    OpenFirst(ffi_paths, 2, nullptr);
  }
  RestoreHandlers(saved, have);
  std::string errors;
  const std::string bridge_paths[] = {dir.empty() ? "" : dir + kBridgeName, kBridgeName};
  void* bridge = OpenFirst(bridge_paths, 2, &errors);
  RestoreHandlers(saved, have);

  if (bridge == nullptr) {
    ThrowLinkError(env, "cannot load " + std::string(kBridgeName) + " (the tvmgen JNI bridge, with the tvmgen and " +
                            "TVM runtime libraries it needs): " + errors);
    return JNI_ERR;
  }
  auto reg = reinterpret_cast<RegisterFn>(dlsym(bridge, "TvmgenJniRegister"));
  if (reg == nullptr) {
    ThrowLinkError(env, std::string(kBridgeName) + " has no TvmgenJniRegister: it does not match libtvmgen_jni.so");
    dlclose(bridge);
    return JNI_ERR;
  }
  if (reg(env) != JNI_OK) {  // an exception (NoClassDefFoundError, NoSuchMethodError) is pending
    dlclose(bridge);
    return JNI_ERR;
  }
  g_bridge = bridge;
  return JNI_VERSION_1_6;
}

extern "C" JNIEXPORT void JNICALL JNI_OnUnload(JavaVM* vm, void*) {
  JNIEnv* env = nullptr;
  if (g_bridge == nullptr || vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6) != JNI_OK) return;
  auto unreg = reinterpret_cast<UnregisterFn>(dlsym(g_bridge, "TvmgenJniUnregister"));
  if (unreg != nullptr) unreg(env);
  // The bridge stays loaded: the TVM runtime cannot be unloaded safely.
}
