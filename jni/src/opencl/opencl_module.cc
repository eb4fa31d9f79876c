// tvmgen's own OpenCL support for the TVM 0.27 runtime (libtvmgen_opencl.so).
//
// The PyPI TVM runtime is built with OpenCL off, and an Android TVM build should not link
// libOpenCL.so (phones without it could not even load the app). Loading this library registers,
// through tvm-ffi globals:
//   device_api.opencl                   a kDLOpenCL DeviceAPI (memory, copies, streams, attributes)
//   ffi.Module.load_from_bytes.opencl   the loader of the OpenCL kernels embedded in a model library
//   tvmgen.opencl.set_cache_dir / cache_dir / cache_stats / reset_cache_stats / info
//   tvmgen.opencl.profiling / kernel_times   per-kernel device times from OpenCL event timestamps
// libOpenCL is opened with dlopen on first use (cl_api.cc). Compiled programs are kept in an
// on-disk cache (kernel_cache.h) so the next start skips the driver's compiler.
//
// This file: the kernel module (the OpenCL kernels embedded in a model library, built on first use
// and launched). Its source handling: program_sources.cc; the blob's loader, the registration of every
// global and the C API: opencl_registration.cc.
#include "kernel_cache.h"
#include "build_helpers.h"
#include "program_sources.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

namespace tvmgen {
namespace opencl {

// The module function that builds every program ahead of the first run (runtime.cc: Model::Prepare).
constexpr const char* kPrepare = "__tvmgen_opencl_prepare";

class OpenCLModule : public ffi::ModuleObj {
 public:
  OpenCLModule(std::string blob, std::string fmt, std::map<std::string, FunctionInfo> fmap, std::string code)
      : blob_(std::move(blob)), fmt_(std::move(fmt)), fmap_(std::move(fmap)), code_(std::move(code)) {
    std::vector<std::pair<std::string, std::string>> sections;
    if (fmt_ == "cl") sections = SplitSource(code_);
    for (const auto& kv : sections) sources_[kv.first] = kv.second;
    bool split = fmt_ == "cl";
    for (const auto& kv : fmap_) split &= sources_.count(kv.first) > 0;
    if (!split) sources_.clear();  // no per-kernel markers (a hand-made module): the whole source
    if (fmt_ == "cl") {
      for (auto& kv : fmap_) {
        kv.second.image_args = ImageParams(split ? sources_.at(kv.first) : code_, kv.first);
        for (bool b : kv.second.image_args) has_images_ |= b;
      }
    }
    // The kernels the programs hold, in source order; the programs are planned per device (Plan, Builds).
    for (const auto& kv : sections) {
      if (split && fmap_.count(kv.first)) used_.push_back(kv);
    }
  }

  ~OpenCLModule() {
    for (auto& kv : builds_) kv.second->Stop();  // builds_, destroyed next, releases the kernels and programs
  }

  const char* kind() const final { return "opencl"; }
  int GetPropertyMask() const final { return ffi::Module::kBinarySerializable | ffi::Module::kRunnable; }
  ffi::Bytes SaveToBytes() const final { return ffi::Bytes(blob_.data(), blob_.size()); }
  ffi::String InspectSource(const ffi::String& format) const final {
    return fmt_ == "cl" ? ffi::String(code_) : ffi::String();
  }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    if (name == kPrepare) {
      // (device_id, wait) -> JSON. Builds (or loads from the cache) every program of the module for the
      // device: in the background (wait false: returns at once), or before returning (wait true: then
      // {"programs", "kernels", "built", "cached", "ms"}, and the first run compiles nothing).
      ffi::ObjectPtr<ffi::Object> self = ffi::GetObjectPtr<ffi::Object>(this);
      return ffi::Function::FromTyped([self, this](int device_id, bool wait) -> ffi::String {
        Builds& b = BuildsFor(device_id);
        b.Start();
        return wait ? ffi::String(b.WaitAll()) : ffi::String("{}");
      });
    }
    auto it = fmap_.find(std::string(name));
    if (it == fmap_.end()) return std::nullopt;
    const FunctionInfo* info = &it->second;
    std::vector<size_t> sizes;
    for (const DLDataType& t : info->arg_types) {
      // TVM's host code passes scalars as 64-bit values: a vector cannot reach a kernel (TVM's codegen refuses it)
      if (t.lanes != 1) TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": vector argument types are not supported";
      sizes.push_back(t.code == kDLOpaqueHandle ? sizeof(cl_mem) : static_cast<size_t>((t.bits + 7) / 8));
    }
    // launch_param_tags -> index into work sizes: blockIdx.{x,y,z} 0..2, threadIdx.{x,y,z} 3..5
    std::vector<int> slots;
    bool dyn_shared = false;
    int work_dim = 1;
    for (const std::string& tag : info->launch_tags) {
      if (tag.rfind("blockIdx.", 0) == 0 && tag.size() == 10) {
        slots.push_back(tag[9] - 'x');
      } else if (tag.rfind("threadIdx.", 0) == 0 && tag.size() == 11) {
        slots.push_back(3 + tag[10] - 'x');
      } else if (tag == "tirx.use_dyn_shared_memory" || tag == "tir.use_dyn_shared_memory") {
        dyn_shared = true;  // OpenCL kernels declare their __local memory: the size is read and unused
      } else {
        slots.push_back(-1);  // other launch hints (cluster, cooperative ...): read and ignored
      }
      int s = slots.empty() ? -1 : slots.back();
      if (s >= 0) work_dim = std::max(work_dim, s % 3 + 1);
    }
    ffi::ObjectPtr<ffi::Object> self = ffi::GetObjectPtr<ffi::Object>(this);
    std::string fname = std::string(name);
    return ffi::Function::FromPacked([self, this, info, sizes, slots, dyn_shared, work_dim, fname](
                                         ffi::PackedArgs args, ffi::Any* rv) {
      Launch(fname, *info, sizes, slots, dyn_shared, work_dim, args);
    });
  }

 private:
  cl_kernel Kernel(const std::string& name, int device_id) {
    Builds& builds = BuildsFor(device_id);
    builds.Start();
    return builds.Take(name);  // another thread may be building it
  }

  void Launch(const std::string& name, const FunctionInfo& info, const std::vector<size_t>& sizes,
              const std::vector<int>& slots, bool dyn_shared, int work_dim, ffi::PackedArgs args) {
    size_t nargs = info.arg_types.size();
    size_t need = nargs + slots.size() + (dyn_shared ? 1 : 0);
    if (static_cast<size_t>(args.size()) < need) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << " takes " << need << " arguments, "
                                  << args.size() << " were given";
    }
    int device_id = current_device;
    cl_kernel kernel = Kernel(name, device_id);
    const Api& api = cl::Get();
    std::lock_guard<std::mutex> lock(launch_mu_);  // clSetKernelArg + enqueue: one caller at a time
    for (size_t i = 0; i < nargs; ++i) {
      const DLDataType& t = info.arg_types[i];
      cl_int err;
      if (t.code == kDLOpaqueHandle) {
        // Host code passes the buffers' data pointers (the cl_mem handles) as opaque pointers.
        const TVMFFIAny& raw = reinterpret_cast<const TVMFFIAny*>(args.data())[i];
        void* ptr = nullptr;
        if (raw.type_index == ffi::TypeIndex::kTVMFFIOpaquePtr) {
          ptr = raw.v_ptr;
        } else if (raw.type_index == ffi::TypeIndex::kTVMFFIDLTensorPtr) {
          ptr = static_cast<DLTensor*>(raw.v_ptr)->data;
        } else if (auto tensor = args[i].try_cast<ffi::Tensor>()) {
          ptr = tensor->data_ptr();
        } else if (raw.type_index != ffi::TypeIndex::kTVMFFINone) {
          TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": argument " << i << " should be a buffer, got "
                                      << args[i].GetTypeKey();
        }
        cl_mem m = static_cast<cl_mem>(ptr);
        if (has_images_ && ptr != nullptr && i < info.image_args.size()) CheckMemoryKind(name, i, info.image_args[i], ptr);
        err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), sizeof(cl_mem), &m);
      } else if (t.code == kDLFloat) {
        double v = args[i].cast<double>();
        if (t.bits == 32) {
          float f = static_cast<float>(v);
          err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), 4, &f);
        } else if (t.bits == 64) {
          err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), 8, &v);
        } else if (t.bits == 16) {
          uint16_t h = FloatToHalf(static_cast<float>(v));
          err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), 2, &h);
        } else {
          TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": float" << int(t.bits) << " scalar arguments are not supported";
        }
      } else {
        int64_t v = 0;
        if (auto x = args[i].try_cast<int64_t>()) {
          v = *x;
        } else {
          v = args[i].cast<bool>();
        }
        unsigned char buf[8];
        if (sizes[i] == 1) { int8_t x = static_cast<int8_t>(v); std::memcpy(buf, &x, 1); }
        else if (sizes[i] == 2) { int16_t x = static_cast<int16_t>(v); std::memcpy(buf, &x, 2); }
        else if (sizes[i] == 4) { int32_t x = static_cast<int32_t>(v); std::memcpy(buf, &x, 4); }
        else { std::memcpy(buf, &v, 8); }
        err = api.SetKernelArg(kernel, static_cast<cl_uint>(i), sizes[i], buf);
      }
      if (err != CL_SUCCESS) {
        TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": clSetKernelArg(" << i << ") failed: " << ErrorName(err);
      }
    }
    size_t work[6] = {1, 1, 1, 1, 1, 1};
    for (size_t j = 0; j < slots.size(); ++j) {
      if (slots[j] < 0) continue;
      int64_t v = args[nargs + j].cast<int64_t>();
      if (v > 0) work[slots[j]] = static_cast<size_t>(v);  // a 0 extent (dynamic shape) launches 1
    }
    size_t global[3], local[3];
    for (int d = 0; d < 3; ++d) {
      global[d] = work[d] * work[3 + d];
      local[d] = work[3 + d];
    }
    if (checked_.insert({kernel, local[0] * local[1] * local[2]}).second) {  // no string copied per launch
      CheckWorkGroup(name, kernel, device_id, local);
    }
    Workspace& w = Workspace::Global();
    void* stream = TVMFFIEnvGetStream(kDLOpenCL, device_id);
    cl_command_queue q = w.Queue(device_id, stream);
    // Profiling mode: the launch's event carries the device's start/end timestamps (TakeKernelTimes).
    cl_event event = nullptr;
    bool profiling = w.Timed(stream);
    cl_int err = api.EnqueueNDRangeKernel(q, kernel, static_cast<cl_uint>(work_dim), nullptr, global, local, 0,
                                          nullptr, profiling ? &event : nullptr);
    if (err == CL_SUCCESS && event != nullptr) w.RecordEvent(name, device_id, event);
    if (err != CL_SUCCESS) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": launch failed: " << ErrorName(err) << " (global "
                                  << global[0] << "x" << global[1] << "x" << global[2] << ", local " << local[0]
                                  << "x" << local[1] << "x" << local[2] << ")";
    }
  }

  // What a kernel's work-group needs against what the device takes, before its first launch with that size: a
  // driver given more threads than a kernel can run (CL_KERNEL_WORK_GROUP_SIZE: the device's largest work-group,
  // or fewer where the kernel's registers allow fewer) or more local memory than the device has fails the launch
  // with a code, or on some drivers loses the device; this names the kernel, what it needs and the fix.
  void CheckWorkGroup(const std::string& name, cl_kernel kernel, int device_id, const size_t* local) {
    const Api& api = cl::Get();
    if (api.GetKernelWorkGroupInfo == nullptr) return;
    const DeviceInfo& dev = Workspace::Global().device(device_id);
    size_t threads = local[0] * local[1] * local[2], most = 0;
    cl_ulong local_mem = 0;
    bool known = api.GetKernelWorkGroupInfo(kernel, dev.id, CL_KERNEL_WORK_GROUP_SIZE, sizeof(most), &most,
                                            nullptr) == CL_SUCCESS;
    bool mem_known = api.GetKernelWorkGroupInfo(kernel, dev.id, CL_KERNEL_LOCAL_MEM_SIZE, sizeof(local_mem),
                                                &local_mem, nullptr) == CL_SUCCESS;
    std::ostringstream why;
    if (known && most > 0 && threads > most) {
      why << "work-groups of " << threads << " threads (" << local[0] << "x" << local[1] << "x" << local[2]
          << "), and the device runs it with at most " << most << " (CL_KERNEL_WORK_GROUP_SIZE: its largest "
          << "work-group is " << dev.max_work_group << ")";
    } else if (mem_known && dev.local_mem > 0 && local_mem > dev.local_mem) {
      why << local_mem << " bytes of local memory per work-group, and the device has " << dev.local_mem;
    }
    if (!why.str().empty()) {
      TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << " cannot run on " << dev.name << ": it needs "
                                  << why.str() << ". Fix: compile for this device's GPU family (--gpu-family: "
                                  << "tvmgen keeps each family's kernels within its limits, docs/gpu.md)";
    }
  }

  // ---------------------------------------------------------------- the programs
  // groups == 0: KernelsPerProgram() kernels per program, in source order (0: the whole module in one).
  // groups > 0: that many programs of consecutive kernels, of about equal KernelWeight. A merged source that is
  // not of TVM's usual shape gives one program per kernel.
  std::vector<ProgramSource> Plan(size_t groups) const {
    std::vector<ProgramSource> plan;
    if (used_.empty()) {  // no per-kernel markers (a hand-made module, a binary format): the whole source
      ProgramSource whole{{}, code_, "", ""};
      for (const auto& kv : fmap_) whole.kernels.push_back(kv.first);
      plan.push_back(std::move(whole));
      return plan;
    }
    std::vector<std::vector<size_t>> members;  // indices into used_
    if (groups == 0) {
      size_t per = KernelsPerProgram() > 0 ? static_cast<size_t>(KernelsPerProgram()) : used_.size();
      for (size_t i = 0; i < used_.size(); i += per) {
        members.emplace_back();
        for (size_t j = i; j < std::min(used_.size(), i + per); ++j) members.back().push_back(j);
      }
    } else {  // contiguous runs of about equal weight: the first run's kernels are in the first programs
      const std::vector<size_t>& weight = Sizes().weight;
      size_t total = Sizes().total_weight;
      groups = std::min(groups, used_.size());
      size_t acc = 0;
      members.emplace_back();
      for (size_t i = 0; i < used_.size(); ++i) {
        size_t remaining = used_.size() - i, open = groups - members.size();
        bool past = acc + weight[i] / 2 > total * members.size() / groups;
        if (!members.back().empty() && open > 0 && (past || remaining == open)) members.emplace_back();
        members.back().push_back(i);
        acc += weight[i];
      }
    }
    for (const auto& g : members) {
      std::vector<const std::pair<std::string, std::string>*> group;
      for (size_t j : g) group.push_back(&used_[j]);
      ProgramSource p;
      for (const auto* k : group) p.kernels.push_back(k->first);
      p.source = MergeSources(group);
      if (p.source.empty()) {  // not TVM's usual shape: one program per kernel
        for (const auto* k : group) plan.push_back(ProgramSource{{k->first}, k->second, "", ""});
        continue;
      }
      plan.push_back(std::move(p));
    }
    return plan;
  }

  // The kernels' sizes, measured once: each kernel's weight (its definition, not the declarations of the module's
  // other kernels, with its #pragma unroll loops written out: UnrolledBytes), their total, and for the log the
  // definitions' bytes as written and written out.
  struct KernelSizes {
    std::vector<size_t> weight;
    size_t total_weight = 0, text_bytes = 0, unrolled_bytes = 0;
  };
  const KernelSizes& Sizes() const {
    std::call_once(sizes_once_, [this] {
      for (const auto& kv : used_) {
        size_t start = DefinitionStart(kv.second, kv.first);
        std::string def = start == std::string::npos ? kv.second : kv.second.substr(start);
        size_t unrolled = UnrolledBytes(def);
        sizes_.weight.push_back(KernelWeight(unrolled));
        sizes_.total_weight += sizes_.weight.back();
        sizes_.text_bytes += def.size();
        sizes_.unrolled_bytes += unrolled;
      }
    });
    return sizes_;
  }

  // How many programs to plan where helper processes build: the total weight over GroupWeight() (at most
  // MaxHelperPrograms(), one per kernel); 0 (the usual plan, no helpers) for models under 2.5 GroupWeight() (about 1 s of
  // NVIDIA's compiler: a helper's start would cost what it saves; measured, docs/benchmarks.md) or where
  // TVMGEN_OPENCL_KERNELS_PER_PROGRAM is set.
  size_t HelperGroups(int helpers) const {
    if (helpers <= 0 || used_.empty() || KernelsPerProgramSet()) return 0;
    size_t total = Sizes().total_weight;
    if (total * 2 < GroupWeight() * 5) return 0;
    size_t g = (total + GroupWeight() - 1) / GroupWeight();
    g = std::min({g, MaxHelperPrograms(), used_.size()});
    return g >= 3 ? g : 0;
  }

  // ---------------------------------------------------------------- program builds
  // A device's programs, built from the first launch on, or earlier by the prepare function (Model::Prepare;
  // Model::Load starts it in the background, overlapped with the rest of the load). A setup thread opens the
  // device and plans the programs (Plan). Where helper processes build (build_helpers.h), the programs missing
  // from the cache form a queue shared with the helpers: the setup thread builds here, one at a time, those it
  // claims first until a helper is ready, and one thread per helper reads its reports and loads what it stored
  // from the cache (the last one to end builds here what no helper claimed).
  // BuildThreads() threads take the other programs (cache hits; all of them without helpers) in order. A
  // launch takes its program when ready, or builds it itself when no thread (or helper) has started it.
  static int BuildThreads() {
    static int n = [] {
      const char* v = std::getenv("TVMGEN_OPENCL_BUILD_THREADS");
      if (v && *v) return std::max(1, std::atoi(v));
      return static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
    }();
    return n;
  }

  class Builds {
   public:
    Builds(const OpenCLModule* m, int device_id) : m_(m), device_id_(device_id) {}
    ~Builds() {
      Stop();
      if (!Available()) return;
      for (Slot& s : slots_) {
        for (auto& kv : s.kernels) cl::Get().ReleaseKernel(kv.second);
      }
      std::unordered_set<cl_program> released;
      for (Slot& s : slots_) {
        for (auto& kv : s.programs) {
          if (kv.second && released.insert(kv.second).second) cl::Get().ReleaseProgram(kv.second);
        }
      }
    }

    // The setup thread, once; it starts the build threads.
    void Start() {
      std::lock_guard<std::mutex> lock(mu_);
      if (started_ || stop_) return;
      started_ = true;
      setup_thread_ = std::thread([this] {
        Setup();
        Work();
      });
    }

    void Stop() {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      if (setup_thread_.joinable()) setup_thread_.join();  // no thread is added after it
      for (std::thread& t : threads_) if (t.joinable()) t.join();
    }

    // Kernel `name`: its program built already, or waited for, or built here. Throws its build error.
    cl_kernel Take(const std::string& name) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return setup_done_; });
      if (!setup_error_.empty()) TVM_FFI_THROW(RuntimeError) << setup_error_;
      size_t i = program_of_.at(name);
      if (slots_[i].state != kDone) {
        KernelCache::Global().stats.launch_waits++;
        if (LogOn()) {
          std::fprintf(stderr, "tvmgen-opencl: a launch waits for program %zu/%zu (at %.1f ms)\n", i + 1,
                       slots_.size(), MsSince(setup_t0_));
        }
        lock.unlock();
        Claim(i);
        ClaimQueued(i);
        lock.lock();
      }
      cv_.wait(lock, [&] { return slots_[i].state == kDone; });
      if (!slots_[i].error.empty()) TVM_FFI_THROW(RuntimeError) << slots_[i].error;
      return slots_[i].kernels.at(name);
    }

    // Every program built (here too, beside the threads): JSON {"programs", "kernels", "built", "cached",
    // "helpers" (of the built: by helper processes), "ms"}.
    std::string WaitAll() {
      auto t0 = std::chrono::steady_clock::now();
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return setup_done_; });
        if (!setup_error_.empty()) TVM_FFI_THROW(RuntimeError) << setup_error_;
      }
      for (size_t i = 0; i < slots_.size(); ++i) Claim(i);  // the queue's are the setup thread's and the helpers'
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        for (const Slot& s : slots_) if (s.state != kDone) return false;
        return true;
      });
      int built = 0, cached = 0, helpers = 0;
      size_t kernels = 0;
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (!slots_[i].error.empty()) TVM_FFI_THROW(RuntimeError) << slots_[i].error;
        (slots_[i].from_cache && !slots_[i].by_helper ? cached : built)++;
        helpers += slots_[i].by_helper ? 1 : 0;
        kernels += plan_[i].kernels.size();
      }
      std::ostringstream o;
      o << "{\"programs\": " << slots_.size() << ", \"kernels\": " << kernels << ", \"built\": " << built
        << ", \"cached\": " << cached << ", \"helpers\": " << helpers << ", \"ms\": " << MsSince(t0) << "}";
      return o.str();
    }

   private:
    // kPending: built by a build thread or a launch; kQueued: missing from the cache, built by this process or
    // a helper, whichever claims it first (kClaiming: this process is trying, kHelper: a helper has it).
    enum { kPending, kQueued, kClaiming, kHelper, kBuilding, kDone };
    struct Slot {
      int state = kPending;
      bool from_cache = true;
      bool by_helper = false;  // built by a helper process this start, loaded from the cache here
      std::unordered_map<std::string, cl_program> programs;  // kernel -> its program
      std::unordered_map<std::string, cl_kernel> kernels;    // made with the program (a driver may load its code then)
      std::string error;
    };

    // Opens the device, plans the programs, starts the helper processes and the build threads, then builds
    // the queue's programs it claims.
    void Setup() {
      setup_t0_ = std::chrono::steady_clock::now();
      std::vector<ProgramSource> plan;
      std::string error;
      std::vector<size_t> queue;
      std::shared_ptr<HelperBuilds> helpers;
      // The plans (string work on a few MB) in parallel with the driver's start: the usual one, and the helpers'
      // (with the sources' hashes) where helpers may build. Whichever is not used finishes with Setup.
      size_t maybe = 0;
      std::future<std::vector<ProgramSource>> plain, spec;
      try {
        plain = std::async(std::launch::async, [this] { return m_->Plan(0); });
        spec = std::async(std::launch::async, [this, &maybe] {
          maybe = m_->HelperGroups(PotentialHelperProcesses());
          return maybe ? HashedPlan(maybe) : std::vector<ProgramSource>();
        });
        std::vector<ProgramSource> spec_plan;
        std::shared_ptr<HelperBuilds> early = StartEarly(&spec, &spec_plan);  // gets spec where it may start them
        Workspace& w = Workspace::Global();
        const DeviceInfo& dev = w.Probe(device_id_);
        if (LogOn()) std::fprintf(stderr, "tvmgen-opencl: platform and device found (at %.1f ms)\n", MsSince(setup_t0_));
        int n = HelperProcesses(dev, w.platform_name());
        size_t groups = m_->HelperGroups(n);
        if (early && groups > 0 && groups == maybe) {
          plan = std::move(spec_plan);
          queue = AdoptEarly(&plan, early, &helpers);
        } else if (groups > 0) {
          if (early) StopEarly(early.get(), "this platform builds in-process");
          plan = spec.valid() ? spec.get() : std::move(spec_plan);  // sets maybe (StartEarly may have got it)
          if (groups != maybe || plan.size() != groups) plan = HashedPlan(groups);
          queue = StartHelpers(&plan, n, &helpers);  // before this process's context: theirs are made meanwhile
          if (LogOn() && helpers) {
            std::fprintf(stderr, "tvmgen-opencl: %zu helper processes started (at %.1f ms)\n", helpers->size(),
                         MsSince(setup_t0_));
          }
        } else {
          if (early) StopEarly(early.get(), "this platform builds in-process");
          plan = plain.get();
        }
        w.device(device_id_);
        if (LogOn()) std::fprintf(stderr, "tvmgen-opencl: context made (at %.1f ms)\n", MsSince(setup_t0_));
      } catch (const ffi::Error& e) {
        error = e.message();
      }
      if (LogOn() && error.empty() && !m_->used_.empty()) {
        const KernelSizes& code = m_->Sizes();
        std::fprintf(stderr, "tvmgen-opencl: %zu kernels, %.0f KB of OpenCL C (%.0f KB with its #pragma unroll loops "
                     "written out) in %zu programs%s\n", m_->used_.size(), code.text_bytes / 1024.0,
                     code.unrolled_bytes / 1024.0,
                     plan.size(), helpers ? ", built by helper processes" : "");
      }
      size_t pending = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        plan_ = std::move(plan);
        for (size_t i = 0; i < plan_.size(); ++i) {
          for (const std::string& k : plan_[i].kernels) program_of_[k] = i;
        }
        slots_.resize(plan_.size());
        queue_pos_.assign(plan_.size(), 0);
        for (size_t j = 0; j < queue.size(); ++j) {
          slots_[queue[j]].state = kQueued;
          queue_pos_[queue[j]] = j;
          queued_at_start_.insert(queue[j]);
        }
        queued_left_ = queue.size();
        queue_ = queue;
        helpers_alive_ = helpers ? static_cast<int>(helpers->size()) : 0;
        helpers_ = helpers;
        setup_error_ = error;
        setup_done_ = true;
        cv_.notify_all();
        if (stop_ || !error.empty()) return;
        for (size_t k = 0; helpers && k < helpers->size(); ++k) {
          threads_.emplace_back([this, helpers, k] { Follow(helpers, k); });
        }
        pending = plan_.size() - queue.size();
        int threads = std::min<int>(BuildThreads(), static_cast<int>(pending));
        for (int i = queue.empty() ? 1 : 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
      }
      // This process builds the queue's programs until a helper is ready: then its loads of what the helpers
      // built would wait for its own builds (NVIDIA's compiler takes one call at a time per process).
      for (size_t i : queue) {
        if (helper_ready_) break;
        ClaimQueued(i);
      }
    }

    // A cold start's helpers, started before this process's driver start (the platform and the context: ~0.3 s
    // on NVIDIA, the helpers' builds would wait for it), where helpers are likely (HelpersLikelyEarly), the model
    // is planned for them, and the kernel cache has no record that this plan was built (PlanMarker): every
    // program is theirs to take (which are missing is known only with the device). Gets the helpers' plan
    // from `spec` into *plan when it may start them; nullptr where it did not start them.
    std::shared_ptr<HelperBuilds> StartEarly(std::future<std::vector<ProgramSource>>* spec,
                                             std::vector<ProgramSource>* plan) {
      if (KernelCache::Global().Dir().empty() || !HelpersLikelyEarly()) return nullptr;
      *plan = spec->get();
      if (plan->size() < 3) return nullptr;
      marker_ = PlanMarker(*plan);
      struct stat st;
      if (stat(marker_.c_str(), &st) == 0) return nullptr;  // built before: the usual path finds what is missing
      std::vector<const std::string*> sources;
      for (const ProgramSource& ps : *plan) sources.push_back(&ps.source);
      int n = std::min<int>(PotentialHelperProcesses(), static_cast<int>(plan->size()) - 1);
      std::shared_ptr<HelperBuilds> h = Spawn(sources, n, false);  // none: the usual path tries again, and says why
      if (h && LogOn()) {
        std::fprintf(stderr, "tvmgen-opencl: %zu helper processes started before the device was found (no record "
                     "in the kernel cache that this model's %zu programs were built: a cold start) (at %.1f ms)\n",
                     h->size(), plan->size(), MsSince(setup_t0_));
      }
      return h;
    }

    // The early helpers' queue, once the device is known: every program, when two or more are missing from the
    // cache; else they are stopped (nothing to build: the cache was filled without the record) and none.
    std::vector<size_t> AdoptEarly(std::vector<ProgramSource>* plan, std::shared_ptr<HelperBuilds> early,
                                   std::shared_ptr<HelperBuilds>* out) {
      if (KeysAndMissing(plan).size() < 2) {
        StopEarly(early.get(), "the programs are in the kernel cache");
        WriteMarker();
        return {};
      }
      *out = early;
      std::vector<size_t> all(plan->size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = i;
      return all;
    }

    // The plan's cache keys, set; the programs missing from the kernel cache (all of them with the cache off).
    std::vector<size_t> KeysAndMissing(std::vector<ProgramSource>* plan) const {
      std::string dir = KernelCache::Global().Dir();
      std::vector<size_t> missing;
      for (size_t i = 0; i < plan->size(); ++i) {
        ProgramSource& ps = (*plan)[i];
        ps.key = CacheKey(ps.sha, device_id_);
        struct stat st;
        if (dir.empty() || stat(KernelCache::Global().PathFor(dir, ps.key).c_str(), &st) != 0) missing.push_back(i);
      }
      return missing;
    }

    void StopEarly(HelperBuilds* early, const char* why) {
      early->StopAll();
      if (LogOn()) std::fprintf(stderr, "tvmgen-opencl: the helper processes started early were stopped (%s)\n", why);
    }

    // The kernel cache's record that a plan's programs were built (with this cache): a file named by the hash of
    // the programs' sources, written once they all are; its absence is what makes a start cold for StartEarly.
    static std::string PlanMarker(const std::vector<ProgramSource>& plan) {
      std::string shas;
      for (const ProgramSource& ps : plan) shas += ps.sha + "\n";
      return KernelCache::Global().Dir() + "/plan-" + Sha256Hex(shas) + ".built";
    }

    void WriteMarker() {
      if (marker_.empty()) return;
      int fd = open(marker_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      if (fd >= 0) close(fd);
    }

    // Plan(groups) with each program's Sha256Hex, computed by BuildThreads() threads.
    std::vector<ProgramSource> HashedPlan(size_t groups) const {
      std::vector<ProgramSource> p = m_->Plan(groups);
      std::vector<std::thread> hashers;
      int nh = std::min<int>(BuildThreads(), static_cast<int>(p.size()));
      for (int t = 0; t < nh; ++t) {
        hashers.emplace_back([&p, t, nh] {
          for (size_t i = t; i < p.size(); i += nh) p[i].sha = Sha256Hex(p[i].source);
        });
      }
      for (std::thread& t : hashers) t.join();
      return p;
    }

    // Computes the programs' cache keys; when two or more are missing from the cache, starts helper processes
    // (at most `helpers`, one fewer than the missing programs) and returns the missing programs (the queue).
    // A helper that cannot start is said.
    std::vector<size_t> StartHelpers(std::vector<ProgramSource>* plan, int helpers, std::shared_ptr<HelperBuilds>* out) {
      std::vector<ProgramSource>& p = *plan;
      std::string dir = KernelCache::Global().Dir();
      std::vector<size_t> missing = KeysAndMissing(plan);
      std::vector<const std::string*> sources;
      for (size_t i : missing) sources.push_back(&p[i].source);
      if (!dir.empty()) marker_ = PlanMarker(p);
      if (missing.size() < 2) {
        WriteMarker();  // the next start knows (StartEarly)
        return {};
      }
      int n = std::min<int>(helpers, static_cast<int>(missing.size()) - 1);
      *out = Spawn(sources, n, true);
      return *out ? missing : std::vector<size_t>();
    }

    // Up to n helper processes building `sources` into the kernel cache; fewer are said (also none, with
    // `say_none`); nullptr when none started.
    std::shared_ptr<HelperBuilds> Spawn(const std::vector<const std::string*>& sources, int n, bool say_none) {
      auto h = std::make_shared<HelperBuilds>();
      std::string why;
      bool ok = h->Start(sources, n, device_id_, KernelCache::Global().Dir(), LogOn(), &why);
      if ((!ok || static_cast<int>(h->size()) < n) && (h->size() > 0 || say_none)) {
        std::fprintf(stderr, "tvmgen-opencl: %s: %zu of %d helper processes started%s\n", why.c_str(), h->size(), n,
                     h->size() ? "" : "; building every program in this process");
      }
      return h->size() ? h : nullptr;
    }

    // Reads helper k's reports: each program it stored is loaded from the cache; one it claimed but did not
    // store is built here (Build says why).
    void Follow(std::shared_ptr<HelperBuilds> helpers, size_t k) {
      std::vector<size_t> claimed;
      std::unordered_set<size_t> stored;
      auto slot_of = [&](size_t j) -> long { return j < queue_.size() ? static_cast<long>(queue_[j]) : -1; };
      std::string failed = helpers->Follow(
          k, [&] { helper_ready_ = true; },
          [&](size_t j) {
            long i = slot_of(j);
            if (i < 0) return;
            claimed.push_back(static_cast<size_t>(i));
            std::lock_guard<std::mutex> lock(mu_);
            if (slots_[i].state == kQueued) slots_[i].state = kHelper;
          },
          [&](size_t j) {
            long i = slot_of(j);
            if (i < 0) return;
            stored.insert(static_cast<size_t>(i));
            if (TakeFromHelper(static_cast<size_t>(i))) Build(static_cast<size_t>(i), helpers.get(), "");
          });
      for (size_t i : claimed) {
        if (!stored.count(i) && TakeFromHelper(i)) Build(i, helpers.get(), failed.empty() ? "it stopped" : failed);
      }
      if (!failed.empty() && claimed.empty()) {
        std::fprintf(stderr, "tvmgen-opencl: the helper process %s failed (%s) before building a program: this "
                     "process and the other helpers build them\n", helpers->Executable().c_str(), failed.c_str());
      }
      bool last;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last = --helpers_alive_ == 0;
      }
      if (last) {  // what no helper claimed is this process's now
        for (size_t i : queue_) ClaimQueued(i);
      }
    }

    // Program i, claimed by a helper, is this thread's to finish.
    bool TakeFromHelper(size_t i) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return slots_[i].state != kClaiming; });
      if (slots_[i].state != kQueued && slots_[i].state != kHelper) return false;
      slots_[i].state = kBuilding;
      return true;
    }

    // Builds queued program i here when this process claims it before any helper.
    void ClaimQueued(size_t i) {
      std::shared_ptr<HelperBuilds> helpers;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (slots_[i].state != kQueued || !helpers_) return;
        slots_[i].state = kClaiming;
        helpers = helpers_;
      }
      bool mine = helpers->Claim(queue_pos_[i]);
      {
        std::lock_guard<std::mutex> lock(mu_);
        slots_[i].state = mine ? kBuilding : kHelper;
        cv_.notify_all();
      }
      if (mine) Build(i);
    }

    // Builds program i here unless a thread (or a helper) has it already.
    void Claim(size_t i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (slots_[i].state != kPending) return;
        slots_[i].state = kBuilding;
      }
      Build(i);
    }

    void Work() {
      for (;;) {
        size_t i;
        {
          std::lock_guard<std::mutex> lock(mu_);
          while (next_ < slots_.size() && slots_[next_].state != kPending) ++next_;
          if (stop_ || !setup_error_.empty() || next_ >= slots_.size()) return;
          i = next_;
          slots_[i].state = kBuilding;
        }
        Build(i);
      }
    }

    // helper: the helper that built program i (failed: why it failed, "" if it did not), or none.
    void Build(size_t i, const HelperBuilds* helper = nullptr, const std::string& failed = "") {
      const ProgramSource& plan = plan_[i];
      Slot done;
      auto t0 = std::chrono::steady_clock::now();
      try {
        if (m_->fmt_ != "cl") {
          cl_program p = m_->BuildBinary(device_id_);
          for (const std::string& k : plan.kernels) done.programs[k] = p;
        } else {
          BuildSource(plan, &done, helper ? helper->LoadDir() : "");
        }
        if (helper != nullptr) {
          if (done.from_cache) {
            done.by_helper = true;
            KernelCache::Global().stats.helper_builds++;
          } else {
            std::fprintf(stderr, "tvmgen-opencl: the helper process %s for program %zu/%zu (%zu kernels) %s: built "
                         "it in this process\n", helper->Executable().c_str(), i + 1, slots_.size(),
                         plan.kernels.size(), failed.empty() ? "left no usable binary in the cache"
                                                             : ("failed (" + failed + ")").c_str());
          }
        }
        for (const std::string& k : plan.kernels) {
          cl_int err = CL_SUCCESS;
          done.kernels[k] = cl::Get().CreateKernel(done.programs.at(k), k.c_str(), &err);
          TVMGEN_CL_CHECK(err, "clCreateKernel(" + k + ")");
        }
        if (LogOn()) {
          std::fprintf(stderr, "tvmgen-opencl: program %zu/%zu (%zu kernels) %s in %.1f ms (at %.1f ms)\n", i + 1,
                       slots_.size(), plan.kernels.size(), done.by_helper ? "built by a helper process, loaded from "
                       "the cache" : done.from_cache ? "loaded from the cache" : "built", MsSince(t0),
                       MsSince(setup_t0_));
        }
      } catch (const ffi::Error& e) {
        done.error = e.message();
      }
      std::shared_ptr<HelperBuilds> finished;
      bool record = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        bool queued = helpers_ && queued_left_ > 0 && queued_at_start_.count(i);
        queue_failed_ |= queued && !done.error.empty();
        slots_[i] = std::move(done);
        slots_[i].state = kDone;
        cv_.notify_all();
        if (queued && --queued_left_ == 0) {
          finished = std::move(helpers_);
          record = !queue_failed_;
        }
      }
      if (finished) finished->StopAll();  // the helpers still starting have nothing left to claim
      if (record) WriteMarker();  // every queued program built: the next start is warm (StartEarly)
    }


    // One program for the plan's kernels; should the driver refuse the merged source, one per kernel.
    void BuildSource(const ProgramSource& plan, Slot* out, const std::string& load_dir) {
      std::string what = plan.kernels.size() == 1 ? "kernel " + plan.kernels[0]
                                                  : "the program of " + std::to_string(plan.kernels.size()) + " kernels";
      bool cached = false;
      try {
        cl_program p = BuildProgram(plan.source, device_id_, what, &cached, load_dir, plan.key);
        for (const std::string& k : plan.kernels) out->programs[k] = p;
        out->from_cache = cached;
        return;
      } catch (const ffi::Error& e) {
        if (plan.kernels.size() == 1 || m_->sources_.empty()) throw;
        std::fprintf(stderr, "tvmgen-opencl: %s failed to build (%s); building them one by one\n", what.c_str(),
                     e.message().substr(0, 300).c_str());
      }
      for (const std::string& k : plan.kernels) {
        out->programs[k] = BuildProgram(m_->sources_.at(k), device_id_, "kernel " + k, &cached);
        out->from_cache &= cached;
      }
    }

    const OpenCLModule* m_;
    int device_id_;
    std::chrono::steady_clock::time_point setup_t0_;       // Setup's start: the log's "at" times
    std::vector<ProgramSource> plan_;                      // set by Setup, then fixed
    std::unordered_map<std::string, size_t> program_of_;  // kernel -> index in plan_
    std::vector<size_t> queue_, queue_pos_;                // the helpers' queue: programs; program -> position
    std::unordered_set<size_t> queued_at_start_;          // the queue's programs
    size_t queued_left_ = 0;                               // not built yet
    std::shared_ptr<HelperBuilds> helpers_;                // while the queue has programs left
    int helpers_alive_ = 0;
    std::atomic<bool> helper_ready_{false};                // a helper has its context: this process stops claiming
    bool queue_failed_ = false;                            // a queued program failed to build
    std::string marker_;                                   // PlanMarker of the helpers' plan, where there is one
    std::vector<Slot> slots_;
    size_t next_ = 0;
    bool started_ = false, stop_ = false, setup_done_ = false;
    std::string setup_error_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread setup_thread_;
    std::vector<std::thread> threads_;
  };

  Builds& BuildsFor(int device_id) {
    std::lock_guard<std::mutex> lock(builds_mu_);
    auto& b = builds_[device_id];
    if (!b) b = std::make_unique<Builds>(this, device_id);
    return *b;
  }

  // A module of a binary format (xclbin, aocx): its code is the program.
  cl_program BuildBinary(int device_id) const {
    Workspace& w = Workspace::Global();
    const Api& api = cl::Get();
    DeviceInfo& dev = w.device(device_id);
    const unsigned char* b = reinterpret_cast<const unsigned char*>(code_.data());
    size_t len = code_.size();
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    cl_program p = api.CreateProgramWithBinary(w.context(), 1, &dev.id, &len, &b, &status, &err);
    TVMGEN_CL_CHECK(err, "clCreateProgramWithBinary (" + fmt_ + ")");
    TVMGEN_CL_CHECK(api.BuildProgram(p, 1, &dev.id, "", nullptr, nullptr), "clBuildProgram (" + fmt_ + ")");
    return p;
  }

  // A texture kernel's image parameter must get an image and a buffer parameter a buffer (a driver
  // given the wrong kind may crash): e.g. a texture view made by another allocator than tvmgen's.
  static void CheckMemoryKind(const std::string& name, size_t i, bool want_image, void* ptr) {
    bool is_image = Workspace::Global().IsImage(ptr);
    if (want_image == is_image) return;
    TVM_FFI_THROW(RuntimeError) << "OpenCL kernel " << name << ": argument " << i << " is declared as "
                                << (want_image ? "an image (texture memory)" : "a buffer") << " but got "
                                << (is_image ? "an image" : "a buffer") << (want_image ?
                                   ": texture-scoped tensors must be allocated by tvmgen's OpenCL runtime (its "
                                   "device API, or the VM's allocator DeviceAllocator.opencl)" : "");
  }

  bool has_images_ = false;
  std::string blob_, fmt_;
  std::map<std::string, FunctionInfo> fmap_;
  std::string code_;
  std::unordered_map<std::string, std::string> sources_;  // each kernel's own source (TVM's sections)
  std::vector<std::pair<std::string, std::string>> used_;  // the launched kernels and their sections, in source order
  mutable std::once_flag sizes_once_;
  mutable KernelSizes sizes_;  // of used_ (Sizes)
  std::mutex launch_mu_, builds_mu_;
  std::set<std::pair<cl_kernel, size_t>> checked_;  // (a device's kernel, threads) checked (under launch_mu_)
  std::map<int, std::unique_ptr<Builds>> builds_;  // per device; owns the kernels and programs
};

ffi::Module MakeModule(std::string blob, std::string fmt, std::map<std::string, FunctionInfo> fmap, std::string code) {
  return ffi::Module(ffi::make_object<OpenCLModule>(std::move(blob), std::move(fmt), std::move(fmap), std::move(code)));
}

}  // namespace opencl
}  // namespace tvmgen
