// tvmgen's parallel launcher, linked into every model library tvmgen exports.
//
// TVM's generated code runs a parallel loop by calling the function that the library's
// `__TVMBackendParallelLaunch` pointer holds; TVM's loader points it at its own thread pool. That pool
// gives task k of n to thread k and the caller waits for every thread: when another process holds a
// core, each parallel kernel waits for a descheduled worker (measured: MobileNetV3-Small at 2 threads,
// 1.2 ms quiet, about 530 ms with two busy processes on the two cores).
//
// This launcher splits each parallel loop into a few chunks per thread. Each thread first claims its
// own chunks (the same part of every loop, so what one kernel wrote is still in that core's cache for
// the next), then any another thread has not started: whoever runs does the work, and the caller only
// waits for chunks a worker has already started. Workers spin for a short time after their last chunk, then sleep.
// `tvmgen_parallel_install` (called by tvmgen's runtimes once TVM has loaded the library) points the
// library's launcher at this one.
//
// A loop whose first calls take under TVMGEN_PARALLEL_MIN_US (default 5) microseconds on one thread
// runs on the caller alone from then on: splitting it would cost more than it saves.
//
// Subnormal floats: an x86 operation whose input or result is subnormal takes a microcode assist (about a
// hundred cycles instead of a few), and models make them: attention's small probabilities, products of
// small activations, decaying states. Every launch runs its chunks with subnormals flushed to zero (x86's
// FTZ and DAZ, Arm's FZ) unless TVMGEN_DENORMALS=keep. The launching thread gets its own mode back when
// the launch ends, so the app's other code keeps IEEE subnormals; the workers run only kernels and keep
// the flush.
//
// Settings (environment, read once): TVMGEN_DENORMALS (flush, the default, or keep);
// TVMGEN_PARALLEL_SPIN_US: how long an idle worker spins before it sleeps (default 200);
// TVMGEN_PARALLEL_CHUNKS: chunks per thread (default 8);
// TVMGEN_PARALLEL_MIN_US (0: split every loop); TVM_NUM_THREADS
// (or OMP_NUM_THREADS): the thread count when the runtime passes 0, else one thread per physical core
// among the fastest cores this process may use (the big cores of a phone).
//
// The same library also carries `tvmgen_replay` (below): a model's recorded kernel calls made in one call,
// for the Python runtime's direct calls.
//
// Written against pthreads and libc only, so a model library needs no C++ runtime library.

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TVMGEN_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__) || defined(__arm__)
#define TVMGEN_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define TVMGEN_CPU_RELAX() ((void)0)
#endif

namespace {

// The thread's floating-point control word with subnormals flushed to zero; returns the word it had.
uint64_t FlushSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
  const unsigned old = _mm_getcsr();
  const unsigned flush = old | 0x8040u;  // FTZ (bit 15): results; DAZ (bit 6): inputs
  if (flush != old) _mm_setcsr(flush);
  return old;
#elif defined(__aarch64__)
  uint64_t old;
  asm volatile("mrs %0, fpcr" : "=r"(old));
  const uint64_t flush = old | (uint64_t(1) << 24);  // FZ: inputs and results, single and double precision
  if (flush != old) asm volatile("msr fpcr, %0" : : "r"(flush));
  return old;
#else
  return 0;
#endif
}

void RestoreControlWord(uint64_t old) {
#if defined(__x86_64__) || defined(__i386__)
  if (_mm_getcsr() != static_cast<unsigned>(old)) _mm_setcsr(static_cast<unsigned>(old));
#elif defined(__aarch64__)
  uint64_t now;
  asm volatile("mrs %0, fpcr" : "=r"(now));
  if (now != old) asm volatile("msr fpcr, %0" : : "r"(old));
#else
  (void)old;
#endif
}

bool FlushByDefault() {
  const char* v = getenv("TVMGEN_DENORMALS");
  return v == nullptr || strcmp(v, "keep") != 0;
}

// A launch on the calling thread: subnormals flushed inside it (where the pool flushes), the caller's own
// control word back at its end.
class CallerMode {
 public:
  explicit CallerMode(bool flush) : flush_(flush), saved_(flush ? FlushSubnormals() : 0) {}
  ~CallerMode() {
    if (flush_) RestoreControlWord(saved_);
  }
  CallerMode(const CallerMode&) = delete;
  CallerMode& operator=(const CallerMode&) = delete;

 private:
  const bool flush_;
  const uint64_t saved_;
};

// The layout TVM's code generator uses (c_backend_api.h).
struct ParallelGroupEnv {
  void* sync_handle;
  int32_t num_task;
};
using ParallelLambda = int (*)(int task_id, ParallelGroupEnv* penv, void* cdata);

constexpr int kMaxThreads = 64;
// TVM's generated code gives task k of n the iterations [k * ceil(E / n), (k + 1) * ceil(E / n)) of a loop of E:
// with 2 chunks per thread a loop of 14 (a 14 x 14 map's rows) on 2 threads was chunks of 4, 4, 4 and 2, one
// thread's 8 iterations against the other's 6, and no chunk left to take (13 rows: 8 against 5). With 8 per
// thread the chunks are single rows and the thread that finishes first takes the other's last ones. At two
// threads (Zen 2, 3 processes each, sums of the kernels' fastest times): MobileNetV2 3.87 -> 3.71 ms,
// SqueezeNet 4.09 -> 3.97, EfficientNet-B0 7.09 -> 6.89, MnasNet 3.85 -> 3.75, ResNet-18 the same; kernels
// of 10-20 us about 2% longer (a claim and a call per chunk), MobileNetV3-Small's and the segmentation head's
// whole runs not slower.
constexpr int kChunksPerThread = 8;

int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return atoi(v);
}

int CurrentCpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The first number in a sysfs file ("0-3", "2", "1804800"), or -1.
long ReadSysfsNumber(int cpu, const char* leaf) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/%s", cpu, leaf);
  FILE* f = fopen(path, "r");
  if (f == nullptr) return -1;
  long value = -1;
  if (fscanf(f, "%ld", &value) != 1) value = -1;
  fclose(f);
  return value;
}

// One thread per physical core among the fastest cores this process may run on.
int DefaultThreads() {
  const int env = EnvInt("TVM_NUM_THREADS", EnvInt("OMP_NUM_THREADS", 0));
  if (env > 0) return env;
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  long top = -1;
  int count = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    const long sibling = ReadSysfsNumber(c, "topology/thread_siblings_list");
    if (sibling >= 0 && sibling != c && CPU_ISSET(sibling, &set)) continue;  // a second hardware thread
    const long khz = ReadSysfsNumber(c, "cpufreq/cpuinfo_max_freq");  // -1 where there is no cpufreq (VMs)
    if (khz > top) {
      top = khz;
      count = 0;
    }
    if (khz == top) ++count;
  }
  return count > 0 ? count : 1;
#else
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
#endif
}

class Pool {
 public:
  Pool()
      : flush_(FlushByDefault()),
        spin_ns_(int64_t(EnvInt("TVMGEN_PARALLEL_SPIN_US", 200)) * 1000),
        min_parallel_ns_(int64_t(EnvInt("TVMGEN_PARALLEL_MIN_US", 5)) * 1000),
        chunks_per_thread_(EnvInt("TVMGEN_PARALLEL_CHUNKS", kChunksPerThread)) {
    if (chunks_per_thread_ < 1) chunks_per_thread_ = 1;
    if (chunks_per_thread_ > 256) chunks_per_thread_ = 256;
    pthread_mutex_init(&launch_mu_, nullptr);
    pthread_mutex_init(&sleep_mu_, nullptr);
    pthread_cond_init(&wake_, nullptr);
  }

  // Runs when the library is unloaded (or the process exits): the workers stop before their code goes.
  ~Pool() {
    pthread_mutex_lock(&sleep_mu_);
    stop_.store(true, std::memory_order_seq_cst);
    pthread_cond_broadcast(&wake_);
    pthread_mutex_unlock(&sleep_mu_);
    for (int i = 0; i < num_workers_; ++i) pthread_join(workers_[i], nullptr);
  }

  int SetThreads(int n) {
    pthread_mutex_lock(&launch_mu_);
    if (n <= 0) n = DefaultThreads();
    if (n > kMaxThreads) n = kMaxThreads;
    while (num_workers_ < n - 1) {
      WorkerArg* arg = &args_[num_workers_];
      *arg = WorkerArg{this, num_workers_ + 1};
      if (pthread_create(&workers_[num_workers_], nullptr, &Pool::WorkerMain, arg) != 0) {
        n = num_workers_ + 1;  // as many threads as the system gave
        break;
      }
      ++num_workers_;
    }
    threads_.store(n, std::memory_order_release);
    pthread_mutex_unlock(&launch_mu_);
    return n;
  }

  int Threads() const { return threads_.load(std::memory_order_acquire); }

  int Launch(ParallelLambda fn, void* cdata, int num_task) {
    const CallerMode mode(flush_ && !in_launch_);  // a nested launch runs inside its outer launch's mode
    const int n = Threads();
    // A nested launch (from inside a chunk), a one-thread pool or a launch that must synchronise
    // (num_task given: the code may call TVMBackendParallelBarrier) runs on the calling thread as one task.
    if (in_launch_ || n <= 1 || num_task > 1) {
      ParallelGroupEnv env{nullptr, 1};
      return fn(0, &env, cdata);
    }
    pthread_mutex_lock(&launch_mu_);  // one launch at a time from different app threads
    in_launch_ = true;
    if (RunsAlone(fn, cdata)) {
      const int result = alone_result_;
      in_launch_ = false;
      pthread_mutex_unlock(&launch_mu_);
      return result;
    }
    const int per = chunks_per_thread_;
    fn_ = fn;
    cdata_ = cdata;
    env_.num_task = n * per;
    remaining_.store(n * per, std::memory_order_relaxed);
    error_.store(0, std::memory_order_relaxed);
    const uint64_t epoch = epoch_.load(std::memory_order_relaxed) + 1;
    for (int k = 0; k < n; ++k) {  // thread k's own chunks: [k * per, (k + 1) * per)
      ranges_[k].v.store((epoch << 32) | (uint64_t((k + 1) * per) << 16) | uint64_t(k * per),
                         std::memory_order_relaxed);
    }
    caller_cpu_.store(CurrentCpu(), std::memory_order_relaxed);
    epoch_.store(epoch, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      pthread_mutex_lock(&sleep_mu_);
      pthread_cond_broadcast(&wake_);
      pthread_mutex_unlock(&sleep_mu_);
    }
    RunChunks(static_cast<uint32_t>(epoch), 0, n);
    for (int i = 0; remaining_.load(std::memory_order_acquire) != 0; ++i) {
      if (i < 4096) {
        TVMGEN_CPU_RELAX();
      } else {
        sched_yield();  // a worker was descheduled inside a chunk
      }
    }
    in_launch_ = false;
    const int error = error_.load(std::memory_order_relaxed);
    pthread_mutex_unlock(&launch_mu_);
    return error;
  }

 private:
  // Loops too small to be worth splitting run on the caller alone: each loop's first kMeasuredCalls
  // calls run alone and are timed; below min_parallel_ns (the fastest of them) it stays alone.
  struct LoopInfo {
    ParallelLambda fn;
    int calls;
    int64_t fastest_ns;
  };
  static constexpr int kMeasuredCalls = 2;
  static constexpr int kLoopSlots = 4096;

  // Under launch_mu_. True when the loop ran here (its result in alone_result_).
  bool RunsAlone(ParallelLambda fn, void* cdata) {
    if (min_parallel_ns_ <= 0) return false;
    LoopInfo* info = nullptr;
    const uintptr_t h = (reinterpret_cast<uintptr_t>(fn) >> 4) * 0x9E3779B97F4A7C15ull;
    for (int probe = 0; probe < 16 && info == nullptr; ++probe) {
      LoopInfo& slot = loops_[(h + probe) % kLoopSlots];
      if (slot.fn == fn || slot.fn == nullptr) {
        if (slot.fn == nullptr) slot = LoopInfo{fn, 0, INT64_MAX};
        info = &slot;
      }
    }
    if (info == nullptr) return false;  // table full: split it
    ParallelGroupEnv env{nullptr, 1};
    if (info->calls >= kMeasuredCalls) {
      if (info->fastest_ns >= min_parallel_ns_) return false;
      alone_result_ = fn(0, &env, cdata);
      return true;
    }
    const int64_t t0 = NowNs();
    alone_result_ = fn(0, &env, cdata);
    const int64_t took = NowNs() - t0;
    if (took < info->fastest_ns) info->fastest_ns = took;
    ++info->calls;
    return true;
  }

  struct alignas(64) Range {
    std::atomic<uint64_t> v{0};  // epoch (32 bits) | end (16) | next unclaimed chunk (16)
  };
  struct WorkerArg {
    Pool* pool;
    int self;
  };

  // Whether this worker runs on another CPU than the launching thread, moving off the launcher's CPU
  // first when it woke up there. After an idle gap (a paced app between camera frames) the workers sleep,
  // and Linux wakes a sleeper on its waker's CPU when the other cores are busy: the worker then takes
  // that CPU from the caller, and the caller waits for the worker's chunks and its spin (measured: a
  // paced run at two threads took twice the one-thread time). Moved elsewhere (sched_setaffinity: this
  // process's other CPUs, without the caller's), the worker helps; where it cannot move it leaves the
  // launch to the others.
  bool OffCallerCpu() {
#if defined(__linux__)
    const int caller = caller_cpu_.load(std::memory_order_relaxed);
    if (caller < 0 || CurrentCpu() != caller) return true;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return false;
    cpu_set_t others = set;
    if (caller < CPU_SETSIZE) CPU_CLR(caller, &others);
    if (CPU_COUNT(&others) == 0) {  // pinned to this CPU: try the process's other CPUs
      if (sched_getaffinity(getpid(), sizeof(others), &others) != 0) return false;
      if (caller < CPU_SETSIZE) CPU_CLR(caller, &others);
      if (CPU_COUNT(&others) == 0) return false;
    }
    return sched_setaffinity(0, sizeof(others), &others) == 0 && CurrentCpu() != caller;
#else
    return true;
#endif
  }

  static void* WorkerMain(void* p) {
    auto* arg = static_cast<WorkerArg*>(p);
    arg->pool->WorkerLoop(arg->self);
    return nullptr;
  }

  // Run chunks of launch `epoch`: thread `self`'s own first, then whatever the other threads left. A worker
  // checks before each chunk that it is still off the caller's CPU (a busy machine's load balancer, or a
  // wake-up inside a chunk, can put it back there; sched_getcpu costs nanoseconds against a chunk's
  // microseconds), and leaves the rest to the others where it cannot move.
  void RunChunks(uint32_t epoch, int self, int n) {
    int done = 0;  // chunks run here, counted off remaining_ once at the end (not a shared write per chunk)
    for (int i = 0; i < n; ++i) {
      std::atomic<uint64_t>& range = ranges_[(self + i) % n].v;
      uint64_t t = range.load(std::memory_order_acquire);
      for (;;) {
        const uint32_t next = t & 0xffff, end = (t >> 16) & 0xffff;
        if (static_cast<uint32_t>(t >> 32) != epoch || next >= end) break;
        if (self != 0 && !OffCallerCpu()) {
          i = n;  // leave the rest to the others
          break;
        }
        if (!range.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // The claim keeps this launch open (the caller waits for it), so its fields are stable.
        ParallelGroupEnv env = env_;
        if (fn_(static_cast<int>(next), &env, cdata_) != 0) error_.store(-1, std::memory_order_relaxed);
        ++done;
        t = range.load(std::memory_order_acquire);
      }
    }
    if (done > 0) remaining_.fetch_sub(done, std::memory_order_acq_rel);
  }

  void WorkerLoop(int self) {
    in_launch_ = true;  // a chunk that launches runs its loop itself
    if (flush_) FlushSubnormals();
    uint64_t seen = epoch_.load(std::memory_order_acquire);
    while (!stop_.load(std::memory_order_acquire)) {
      uint64_t epoch = seen;
      const int64_t until = NowNs() + spin_ns_;
      for (int i = 0;; ++i) {
        epoch = epoch_.load(std::memory_order_acquire);
        if (epoch != seen) break;
        TVMGEN_CPU_RELAX();
        if ((i & 63) == 63 && (NowNs() >= until || stop_.load(std::memory_order_relaxed))) break;
      }
      if (epoch == seen) {
        pthread_mutex_lock(&sleep_mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (!stop_.load(std::memory_order_seq_cst) && epoch_.load(std::memory_order_seq_cst) == seen) {
          pthread_cond_wait(&wake_, &sleep_mu_);
        }
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        pthread_mutex_unlock(&sleep_mu_);
        epoch = epoch_.load(std::memory_order_acquire);
      }
      seen = epoch;
      const int n = Threads();
      if (self < n) RunChunks(static_cast<uint32_t>(epoch), self, n);
    }
  }

  const bool flush_;
  const int64_t spin_ns_;
  const int64_t min_parallel_ns_;
  int chunks_per_thread_;
  LoopInfo loops_[kLoopSlots] = {};
  int alone_result_ = 0;
  std::atomic<int> threads_{1};
  pthread_t workers_[kMaxThreads];
  WorkerArg args_[kMaxThreads];
  int num_workers_ = 0;
  pthread_mutex_t launch_mu_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> caller_cpu_{-1};  // the CPU the latest launch started on
  Range ranges_[kMaxThreads];
  ParallelLambda fn_ = nullptr;
  void* cdata_ = nullptr;
  ParallelGroupEnv env_{nullptr, 1};
  std::atomic<int> remaining_{0};
  std::atomic<int> error_{0};
  pthread_mutex_t sleep_mu_;
  pthread_cond_t wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  static thread_local bool in_launch_;
};

thread_local bool Pool::in_launch_ = false;

Pool pool;  // one per model library

int Launch(ParallelLambda fn, void* cdata, int num_task) { return pool.Launch(fn, cdata, num_task); }

}  // namespace

extern "C" {

// Point `slot` (the library's __TVMBackendParallelLaunch) at this launcher, with `threads` threads
// (0: TVM_NUM_THREADS, else one per big core). Returns the thread count.
__attribute__((visibility("default"))) int tvmgen_parallel_install(void** slot, int threads) {
  const int n = pool.SetThreads(threads);
  if (slot != nullptr) *slot = reinterpret_cast<void*>(&Launch);
  return n;
}

// A model's kernel calls, recorded by the Python runtime (generator/tvmgen/runtime/direct_calls.py), made
// in one call: from Python, each call of a kernel through tvm-ffi costs about 0.4 us, most of a small
// model's run (11 kernels of 0.25 us each in a keyword spotter). Exported as a tvm-ffi function of the
// library (`lib["tvmgen_replay"]`, the `__tvm_ffi_` prefix being how TVM finds a library's functions), so
// the one call from Python costs what one kernel call did. Its arguments, all integers: the address of
// `n` kernel entry points (each a library function of the same convention), of their arguments laid out
// one after the other as TVMFFIAny values (tensors as tensor objects, as tvm-ffi passes them), of the
// `n` argument counts, and `n`. A kernel that fails has set its error: its code is returned at once.
struct TvmgenAny {  // TVMFFIAny's layout (tvm/ffi/c_api.h): a type index, padding, an 8-byte value
  int32_t type_index;
  uint32_t padding;
  int64_t value;
};
typedef int (*TvmgenSafeCall)(void* self, const TvmgenAny* args, int32_t num_args, TvmgenAny* result);
struct DLTensorHead {  // DLTensor's layout (dlpack.h)
  void* data;
  int32_t device_type, device_id;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  const int64_t* shape;
  const int64_t* strides;
  uint64_t byte_offset;
};
struct DLTensorView {
  const DLTensorHead* t;
  uint64_t Bytes() const {
    uint64_t n = (static_cast<uint64_t>(t->bits) * t->lanes + 7) / 8;
    for (int32_t i = 0; i < t->ndim; ++i) n *= static_cast<uint64_t>(t->shape[i]);
    return n;
  }
  char* Data() const { return static_cast<char*>(t->data) + t->byte_offset; }
};

__attribute__((visibility("default"))) int __tvm_ffi_tvmgen_replay(void*, const TvmgenAny* args, int32_t num_args,
                                                                   TvmgenAny* result) {
  if (num_args != 4) return -1;
  const TvmgenSafeCall* kernels = reinterpret_cast<const TvmgenSafeCall*>(args[0].value);
  const TvmgenAny* call_args = reinterpret_cast<const TvmgenAny*>(args[1].value);
  const int32_t* counts = reinterpret_cast<const int32_t*>(args[2].value);
  const int64_t n = args[3].value;
  for (int64_t i = 0; i < n; ++i) {
    TvmgenAny ignored = {0, 0, 0};
    const int rc = kernels[i](nullptr, call_args, counts[i], &ignored);
    if (rc != 0) return rc;
    call_args += counts[i];
  }
  result->type_index = 0;  // None
  result->padding = 0;
  result->value = 0;
  return 0;
}

// One tensor's bytes copied into another of the same size, both in host memory: a streaming model's new
// state into the buffer the next run reads it from, made as the last of `tvmgen_replay`'s calls.
static DLTensorView TensorOf(const TvmgenAny& a) {
  // a tensor object (its DLTensor after the 24-byte object header, tvm/ffi/c_api.h) or a DLTensor*
  const char* p = reinterpret_cast<const char*>(a.value);
  return DLTensorView{reinterpret_cast<const DLTensorHead*>(a.type_index == 7 ? p : p + 24)};
}

__attribute__((visibility("default"))) int __tvm_ffi_tvmgen_copy(void*, const TvmgenAny* args, int32_t num_args,
                                                                 TvmgenAny* result) {
  if (num_args != 2) return -1;
  const DLTensorView src = TensorOf(args[0]), dst = TensorOf(args[1]);
  const uint64_t n = src.Bytes();
  if (n != dst.Bytes()) return -1;
  memcpy(dst.Data(), src.Data(), n);
  result->type_index = 0;
  result->padding = 0;
  result->value = 0;
  return 0;
}

}  // extern "C"
