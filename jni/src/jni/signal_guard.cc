// libtvmgen_jni_sigguard (glibc Linux only): loads libtvm_ffi without letting its library
// constructor replace the JVM's SIGSEGV handler, not even for the moment the constructor runs.
//
// libtvm_ffi, as the apache-tvm-ffi wheels build it (TVM_FFI_BACKTRACE_ON_SEGFAULT=ON), installs
// a SIGSEGV handler from a library constructor: std::signal(SIGSEGV, <print a backtrace, abort>).
// A JVM needs SIGSEGV itself (HotSpot: implicit null checks, safepoint polls, stack banging in
// JIT-compiled code). Restoring the JVM's handler after dlopen returns (loader.cc) leaves a window
// of about a millisecond in which the constructor's handler is installed: a Java thread's
// SIGSEGV inside it aborts the JVM, and -Xcheck:jni's periodic signal check (every 10 ms)
// reports "SIGSEGV handler modified!" when it samples inside it.
//
// This library closes the window. It links libtvm_ffi (DT_NEEDED), so one dlopen of it maps and
// relocates both, then runs libtvm_ffi's constructors. ld.so relocates dependencies first, and
// resolves this library's IFUNC relocation (kAnchor below) while relocating it: after libtvm_ffi's
// relocation, before any constructor of this dlopen runs. The resolver points libtvm_ffi's GOT
// entry for `signal` at GuardedSignal, which leaves a signal that already has a handler (the
// JVM's) alone. libtvm_ffi calls `signal` nowhere else. The loader still checks and restores the
// handlers after the dlopen, should anything else change them.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>

namespace {

using SignalFn = void (*)(int);
using SignalCall = SignalFn (*)(int, SignalFn);

// libtvm_ffi's `signal`: installs `handler` only if `sig` has none yet (SIG_DFL or SIG_IGN); else
// leaves the installed one and returns it, as if it had been replaced and put back.
SignalFn GuardedSignal(int sig, SignalFn handler) {
  struct sigaction now;
  if (sigaction(sig, nullptr, &now) != 0) return SIG_ERR;
  SignalFn current = (now.sa_flags & SA_SIGINFO) != 0
                         ? reinterpret_cast<SignalFn>(reinterpret_cast<void*>(now.sa_sigaction))
                         : now.sa_handler;
  if (current != SIG_DFL && current != SIG_IGN) return current;
  struct sigaction act;
  std::memset(&act, 0, sizeof(act));
  act.sa_handler = handler;
  act.sa_flags = SA_RESTART;  // what glibc's signal() sets
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  return sigaction(sig, &act, nullptr) == 0 ? current : SIG_ERR;
}

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT, kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT, kGlobDat = R_AARCH64_GLOB_DAT;
#else
#error "signal_guard.cc: add this CPU's JUMP_SLOT / GLOB_DAT relocation types"
#endif

bool EndsWith(const char* s, const char* suffix) {
  size_t n = std::strlen(s), m = std::strlen(suffix);
  return n >= m && std::strcmp(s + n - m, suffix) == 0;
}

// An address from the dynamic section: glibc has relocated it in place on these CPUs, but be
// correct either way.
uintptr_t DynPtr(uintptr_t base, uintptr_t value) { return value < base ? base + value : value; }

int g_patched = 0;  // GOT entries redirected (TvmgenSigguardPatched)

// Redirects the `signal` GOT entries of the loaded libtvm_ffi (dl_iterate_phdr callback).
int PatchObject(struct dl_phdr_info* info, size_t, void*) {
  if (info->dlpi_name == nullptr || !EndsWith(info->dlpi_name, "libtvm_ffi.so")) return 0;
  uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  uintptr_t relro_start = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(base + ph.p_vaddr);
    if (ph.p_type == PT_GNU_RELRO) relro_start = base + ph.p_vaddr, relro_end = relro_start + ph.p_memsz;
  }
  if (dyn == nullptr) return 1;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(DynPtr(base, d->d_un.d_ptr)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(DynPtr(base, d->d_un.d_ptr)); break;
      case DT_JMPREL: tables[0] = reinterpret_cast<const ElfW(Rela)*>(DynPtr(base, d->d_un.d_ptr)); break;
      case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(DynPtr(base, d->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
      default: break;
    }
  }
  if (symtab == nullptr || strtab == nullptr) return 1;
  long page = sysconf(_SC_PAGESIZE);
  for (int t = 0; t < 2; ++t) {
    if (tables[t] == nullptr) continue;
    for (size_t k = 0; k < sizes[t] / sizeof(ElfW(Rela)); ++k) {
      const ElfW(Rela)& r = tables[t][k];
      uint32_t type = ELF64_R_TYPE(r.r_info);
      if (type != kJumpSlot && type != kGlobDat) continue;
      if (std::strcmp(strtab + symtab[ELF64_R_SYM(r.r_info)].st_name, "signal") != 0) continue;
      uintptr_t slot = base + r.r_offset;
      bool relro = slot >= relro_start && slot < relro_end;  // read-only after relocation (-z relro)
      void* slot_page = reinterpret_cast<void*>(slot & ~static_cast<uintptr_t>(page - 1));
      if (relro && mprotect(slot_page, page, PROT_READ | PROT_WRITE) != 0) continue;
      *reinterpret_cast<SignalCall*>(slot) = &GuardedSignal;
      if (relro) mprotect(slot_page, page, PROT_READ);
      ++g_patched;
    }
  }
  return 1;  // found libtvm_ffi: stop
}

void Anchor() {}

}  // namespace

// Runs while ld.so relocates this library (see the top).
using AnchorFn = void (*)();
extern "C" __attribute__((visibility("hidden"))) AnchorFn TvmgenSigguardResolve() {
  dl_iterate_phdr(PatchObject, nullptr);
  return &Anchor;
}

// An IFUNC whose address is taken in data: its IRELATIVE relocation runs the resolver at load time
// (glibc processes IRELATIVE relocations after the object's other ones, so the resolver's own calls
// are bound), whatever the dlopen mode.
extern "C" __attribute__((visibility("hidden"), ifunc("TvmgenSigguardResolve"))) void TvmgenSigguardAnchor();
__attribute__((used)) void (*const kAnchor)() = &TvmgenSigguardAnchor;

// How many GOT entries were redirected: 0 means libtvm_ffi's constructor was free to call the real
// `signal` (the loader then relies on restoring the handlers after the dlopen).
extern "C" __attribute__((visibility("default"))) int TvmgenSigguardPatched() { return g_patched; }
