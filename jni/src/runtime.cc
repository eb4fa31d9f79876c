// tvmgen device runtime. See include/tvmgen/runtime.h.
#include "tvmgen/runtime.h"

#include <dlfcn.h>
#if defined(__APPLE__)
#include <mach-o/dyld.h>
#else
#include <link.h>
#endif
#if defined(__linux__)  // also Android
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <streambuf>
#include <sstream>
#include <utility>

#include "direct_calls.h"
#include "library_loading.h"
#include "manifest.h"
#include "state.h"

namespace tvmgen {
namespace ffi = tvm::ffi;
namespace json = tvm::ffi::json;

namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string ReadFile(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + what + " " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A global function the TVM runtime registers; a clear error names it when absent.
ffi::Function Global(const char* name) {
  auto f = ffi::Function::GetGlobal(name);
  if (!f.has_value()) {
    throw Error(std::string("the TVM runtime lacks the function ") + name +
                " (is libtvm_runtime loaded, and version 0.27?)");
  }
  return *f;
}

// manifest.json's fields (manifest.h)
using manifest::AsObject;
using manifest::Arr;
using manifest::Field;
using manifest::Int;
using manifest::ParamsFile;
using manifest::ParseManifest;
using manifest::Str;
using manifest::TensorList;

}  // namespace

// The directory of a shared library this process has loaded ("" when it has not), with a slash.
std::string LoadedLibraryDir(const std::string& name) {
#if defined(__APPLE__)
  const std::string suffix = "/" + name;
  for (uint32_t i = 0; i < _dyld_image_count(); ++i) {
    std::string path = _dyld_get_image_name(i) ? _dyld_get_image_name(i) : "";
    if (path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return path.substr(0, path.size() - suffix.size() + 1);
    }
  }
  return "";
#else
  struct Query {
    std::string name, dir;
  } q{"/" + name, ""};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        std::string path = info->dlpi_name ? info->dlpi_name : "";
        if (path.size() >= q->name.size() && path.compare(path.size() - q->name.size(), q->name.size(), q->name) == 0) {
          q->dir = path.substr(0, path.size() - q->name.size() + 1);
          return 1;
        }
        return 0;
      },
      &q);
  return q.dir;
#endif
}

// ---------------------------------------------------------------- architecture check
std::string LibraryArch(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char h[20] = {0};
  if (!f.read(reinterpret_cast<char*>(h), sizeof(h))) return "unreadable";
  if (std::memcmp(h, "\x7f" "ELF", 4) != 0) return "not-elf";
  int machine = h[5] == 1 ? (h[18] | (h[19] << 8)) : ((h[18] << 8) | h[19]);
  switch (machine) {
    case 0x3E: return "x86_64";
    case 0xB7: return "aarch64";
    case 0x28: return "arm";
    case 0x03: return "x86";
    default: return "elf-machine-" + std::to_string(machine);
  }
}

namespace {

// Backend runtimes are separate libraries in TVM 0.27: load the one the device needs, from
// the directory libtvm_runtime itself was loaded from (or the library search path).
}  // namespace

void LoadBackend(const std::string& device) {
  if (device == "cpu") return;
  // NNAPI has no device API: its partitions are modules whose loader TVM's runtime built with
  // USE_NNAPI_RUNTIME=ON registers, in libtvm_runtime_extra.
  const bool nnapi = device == "nnapi";
  std::string want = nnapi ? "ffi.Module.load_from_bytes.nnapi" : "device_api." + device;
  if (ffi::Function::GetGlobal(want).has_value()) return;  // built in, or already loaded
  auto dir_of = [](const void* addr) {
    Dl_info info;
    std::string dir;
    if (dladdr(addr, &info) && info.dli_fname) {
      dir = info.dli_fname;
      dir = dir.substr(0, dir.find_last_of('/') + 1);
    }
    return dir;
  };
  // tvmgen's own backend (libtvmgen_opencl / libtvmgen_vulkan, beside libtvmgen_runtime) first, then TVM's.
  std::vector<std::string> candidates;
  if (device == "opencl" || device == "vulkan") {
    std::string own = dir_of(reinterpret_cast<const void*>(&LibraryArch));
    candidates.push_back(own + "libtvmgen_" + device + ".so");
    candidates.push_back("libtvmgen_" + device + ".so");
  }
  // TVM's backend libraries sit beside libtvm_runtime.so (in the wheel: tvm/lib, not tvm_ffi/lib).
  std::string lib = nnapi ? "libtvm_runtime_extra.so" : "libtvm_runtime_" + device + ".so";
  candidates.push_back(LoadedLibraryDir("libtvm_runtime.so") + lib);
  candidates.push_back(dir_of(reinterpret_cast<const void*>(&TVMFFIFunctionGetGlobal)) + lib);
  candidates.push_back(lib);
  std::string errors;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      errors += std::string("; ") + (e ? e : path);
      continue;
    }
    if (ffi::Function::GetGlobal(want).has_value()) return;
    errors += "; " + path + " does not register " + want;
  }
  std::string fix = nnapi ? std::string("build the runtime with USE_NNAPI_RUNTIME=ON (jni/ CMake: -DTVMGEN_NNAPI=ON)")
                   : device == "vulkan"
                       ? std::string("put libtvmgen_vulkan.so beside libtvmgen_runtime.so or on the library path "
                                     "(LD_LIBRARY_PATH); jni/ builds it where the Vulkan headers are: apt-get "
                                     "install libvulkan-dev")
                   : device == "opencl" ? std::string("put libtvmgen_opencl.so beside libtvmgen_runtime.so or on "
                                                      "the library path (LD_LIBRARY_PATH)")
                                        : "build the runtime with " + device + " enabled";
  throw Error("this TVM runtime has no " + device + " support (" + want + " is not registered and no backend "
              "library could be loaded" + errors + "); " + fix + ", or compile the model with --device cpu");
}

// ---------------------------------------------------------------- public helpers
// The models linked into this program (TVM system-lib mode: TVM's ffi.SystemLib module).
static ffi::Module SystemLibrary() {
  ffi::Module lib = Global("ffi.SystemLib")().cast<ffi::Module>();
  if (!lib->GetFunction("vm_load_executable", true).has_value()) {
    throw Error("no model is linked into this program: a system-lib artifact's objects must be linked into the "
                "app (libmodel.a with -force_load, or the .o files themselves)");
  }
  return lib;
}

bool HasLinkedModel() {
  try {
    SystemLibrary();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

const char* RuntimeArch() {
#if defined(__aarch64__)
  return "aarch64";
#elif defined(__x86_64__)
  return "x86_64";
#elif defined(__arm__)
  return "arm";
#else
  return "unknown";
#endif
}

// Point a loaded model library's parallel loops at the launcher tvmgen links into it
// (jni/src/parallel/parallel_pool.cc). Returns its thread count, 0 when the library has none.
int InstallParallelPool(const std::string& library, int threads) {
  const char* choice = std::getenv("TVMGEN_THREAD_POOL");  // "tvm": keep TVM's pool
  if (choice != nullptr && std::string(choice) == "tvm") return 0;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return 0;
  auto install = reinterpret_cast<int (*)(void**, int)>(dlsym(handle, "tvmgen_parallel_install"));
  auto slot = static_cast<void**>(dlsym(handle, "__TVMBackendParallelLaunch"));
  const int n = install != nullptr && slot != nullptr ? install(slot, threads) : 0;
  dlclose(handle);  // the reference RTLD_NOLOAD took; TVM keeps its own
  return n;
}

void CheckThreadOptions(const ThreadOptions& options) {
  if (options.threads < 0) throw Error("thread count must be >= 0, got " + std::to_string(options.threads));
  if (options.affinity < -1 || options.affinity > 1) {
    throw Error("affinity must be 1 (big cores), -1 (little cores) or 0, got " + std::to_string(options.affinity));
  }
}

void ConfigureThreads(const ThreadOptions& options) {
  CheckThreadOptions(options);
  Global("runtime.config_threadpool")(options.affinity, options.threads);
}

ArtifactFiles ReadArtifactFiles(const std::string& manifest_json) {
  json::Object man = ParseManifest(manifest_json, "the text given");
  ArtifactFiles files;
  files.library = Str(AsObject(Field(man, "export", "manifest"), "export"), "library", "export");
  files.params = ParamsFile(man);
  for (const manifest::StateEntry& e : manifest::StateList(man)) {
    if (!e.initial.empty()) files.state.push_back(e.initial);
  }
  return files;
}

std::string Timings::ToJson() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"load_ms\": %.4f, \"init_ms\": %.4f, \"prepare_ms\": %.4f, \"first_run_ms\": %.4f, "
                "\"copy_in_ms\": %.4f, \"run_ms\": %.4f, \"copy_out_ms\": %.4f, \"runs\": %d}",
                load_ms, init_ms, prepare_ms, first_run_ms, copy_in_ms, run_ms, copy_out_ms, runs);
  return buf;
}

std::string PrepareStats::ToJson() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "{\"programs\": %d, \"kernels\": %d, \"built\": %d, \"cached\": %d, \"ms\": %.4f}", programs,
                kernels, built, cached, ms);
  return buf;
}

// The function of libtvmgen_opencl's kernel module that builds all its programs: (device_id, wait) -> JSON.
constexpr const char* kOpenCLPrepare = "__tvmgen_opencl_prepare";
// libtvmgen_vulkan's, the same for its pipelines (created in the background from the module's load on).
constexpr const char* kVulkanPrepare = "__tvmgen_vulkan_prepare";

const char* PrepareFunction(const ffi::Module& mod) {
  return std::string(mod->kind()) == "vulkan" ? kVulkanPrepare : kOpenCLPrepare;
}

// Every OpenCL and Vulkan kernel module the library imports (TVM puts each target's kernels in a module of
// its own).
void CollectOpenCLModules(const ffi::Module& mod, std::vector<ffi::Module>* out) {
  for (const ffi::Module& seen : *out) {
    if (seen.same_as(mod)) return;
  }
  std::string kind = mod->kind();
  if (kind == "opencl" || kind == "vulkan") out->push_back(mod);
  for (const ffi::Any& imp : mod->imports()) {
    if (auto m = imp.try_cast<ffi::Module>()) CollectOpenCLModules(*m, out);
  }
}

// ---------------------------------------------------------------- Model
struct Model::Impl {
  std::unique_ptr<MemoryLibrary> memory_library;  // first member, so released after the library's module
  std::string dir, device;
  std::vector<TensorInfo> inputs, outputs;  // the user's: main's less the state (state.h)
  state::HeldState state;
  size_t main_outputs = 0;
  DLDevice dev{kDLCPU, 0};
  ffi::Optional<ffi::Module> lib, vm;
  ffi::Function main, copy_from_bytes, copy_to_bytes;
  std::string entry = "main";
  std::vector<ffi::Tensor> input_tensors, params;
  std::vector<bool> input_set;
  std::vector<ffi::Tensor> results;
  // BindOutput's host bytes, by output; `filled`: they hold the latest Run's output, `in_place`: written by a kernel
  struct Bound {
    void* data = nullptr;
    bool filled = false, in_place = false;
  };
  std::vector<Bound> bound;
  // BindInput's host bytes, by input: main's argument position of the input, `in_place`: the latest Run's kernels
  // read the bytes where they are
  struct BoundInput {
    const void* data = nullptr;
    size_t argument = 0;
    bool in_place = false;
  };
  std::vector<BoundInput> bound_inputs;
  // Host bytes into input `k`'s tensor / from main's output `pos` (output `k`), errors naming the tensor
  void CopyIn(size_t k, const void* data) {
    try {
      copy_from_bytes(input_tensors[k], const_cast<void*>(data), static_cast<int64_t>(inputs[k].nbytes));
    } catch (const ffi::Error& e) {
      throw Error("copying input \"" + inputs[k].name + "\" to " + device + " failed: " + e.what());
    }
  }
  void CopyOut(size_t k, size_t pos, void* data) {
    try {
      copy_to_bytes(results[pos], data, static_cast<int64_t>(outputs[k].nbytes));
    } catch (const ffi::Error& e) {
      throw Error("copying output \"" + outputs[k].name + "\" from " + device + " failed: " + e.what());
    }
  }
  // main's argument position of input `index` (inputs and held state in main's order, then the weights)
  size_t ArgumentOf(size_t index) const {
    std::vector<ffi::AnyView> args;
    state.AppendArgs(input_tensors, &args);
    for (size_t p = 0; p < args.size(); ++p) {
      if (args[p].as<ffi::Object>() == ffi::AnyView(input_tensors[index]).as<ffi::Object>()) return p;
    }
    return args.size();
  }
  // A tensor on the caller's host bytes `data` for `t`, where the kernels may use it in place of the runtime's
  // own (a CPU model without state, `data` aligned as the kernels assume their buffers: TVM's 64 bytes); else none.
  ffi::Optional<ffi::Tensor> CallerTensor(const TensorInfo& t, const void* data) const;
  bool copied_in_since_run = false, copied_out_since_run = false;
  bool host_visible_inputs = false;
  int threads = 0;
  std::string thread_pool = "tvm";
  Timings timings;
  std::vector<int64_t> vm_devices;  // vm_initialization's arguments: (device type, id, allocator) each
  // main's kernel calls recorded on the first run and made again (direct_calls.h), or the VM
  direct::Calls direct;
  bool use_direct = false;
  std::string executor = "relax vm";
  std::vector<ffi::Module> opencl_modules;  // the library's OpenCL and Vulkan kernels (Prepare)
  bool prepared = false;
  PrepareStats prepare_stats;
  // Vulkan: a steady run recorded once and submitted again (libtvmgen_vulkan's tvmgen.vulkan.capture_*,
  // replay): its id, or 0; recordings made (at most kMaxCaptures: a model whose recordings keep being
  // dropped runs the VM)
  ffi::Optional<ffi::Function> capture_begin, capture_end, replay, release, hold;
  int64_t replay_id = 0;
  int captures = 0;
  static constexpr int kMaxCaptures = 8;

  ~Impl() {
    try {
      if (replay_id != 0 && release.has_value()) (*release)(replay_id);
      if (hold.has_value()) (*hold)(Owner(), ffi::Array<int64_t>{});
    } catch (const ffi::Error&) {  // a destructor does not throw
    }
  }
  int64_t Owner() const { return static_cast<int64_t>(reinterpret_cast<intptr_t>(this)); }
  // the buffers of this model's results, which another model's replay must not overwrite
  void HoldResults() {
    if (!hold.has_value()) return;
    ffi::Array<int64_t> ptrs;
    for (const std::vector<ffi::Tensor>* list : {&std::as_const(results), &state.held()}) {
      for (const ffi::Tensor& t : *list) ptrs.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data_ptr())));
    }
    (*hold)(Owner(), ptrs);
  }
  // The recorded run dropped (it reads a buffer that is no longer the state's); `for_good`: none recorded again.
  void DropReplay(bool for_good) {
    if (replay_id != 0) (*release)(replay_id);
    replay_id = 0;
    if (for_good) captures = kMaxCaptures;
  }
  // A Relax VM for the model library, initialised for the manifest's devices.
  ffi::Module NewVM() const {
    ffi::Module made = lib.value()->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
    std::vector<ffi::AnyView> init_args(vm_devices.begin(), vm_devices.end());
    ffi::Any ignored;
    made->GetFunction("vm_initialization").value().CallPacked(init_args.data(), init_args.size(), &ignored);
    return made;
  }
  // A run as direct calls (direct_calls.h): the first records them on a VM of its own, which then goes.
  ffi::Any RunDirect(const std::vector<ffi::AnyView>& args) {
    if (direct.recorded()) return direct.Replay();
    try {
      return direct.Record(NewVM(), args.data(), static_cast<int>(args.size()));
    } catch (direct::Calls::Refused& r) {  // the run itself went through, on the VM
      use_direct = false;
      executor = "relax vm: " + r.why;
      return r.result;
    }
  }
  // A held state tensor was replaced by a new one: what was recorded reads the old one.
  void Replaced() {
    DropReplay(false);
    direct.Forget();
  }
  // After a run: the state outputs become the state held (state.h).
  void AdvanceState() {
    if (!state.Advance(results, input_tensors)) return;
    DropReplay(true);
    if (use_direct) {  // the held state is no longer one buffer for good: the recorded calls would read a stale one
      use_direct = false;
      executor = "relax vm: a state buffer is also one of the outputs, so it cannot be held for good";
    }
  }

  // scope "global.host": a host-visible OpenCL buffer (libtvmgen_opencl), see LoadOptions.
  ffi::Tensor Alloc(const TensorInfo& t, const char* scope = nullptr) {
    static ffi::Function alloc = Global("runtime.TVMTensorAllocWithScope");
    std::vector<int64_t> shape = t.shape;
    ffi::Optional<ffi::String> mem_scope;
    if (scope != nullptr) mem_scope = ffi::String(scope);
    return alloc(ffi::Shape(shape), ffi::StringToDLDataType(t.dtype), dev, mem_scope).cast<ffi::Tensor>();
  }
};

Model::Model() : impl_(new Impl()) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::Load(const std::string& dir_in, const ThreadOptions& threads) {
  LoadOptions options;
  options.threads = threads;
  return Load(dir_in, options);
}

std::unique_ptr<Model> Model::Load(const std::string& dir_in, const LoadOptions& options) {
  std::string dir = dir_in.empty() || dir_in.back() == '/' ? dir_in : dir_in + "/";
  ArtifactData data;
  data.manifest_json = ReadFile(dir + "manifest.json", "the artifact manifest");
  return LoadArtifact(dir.empty() ? "./" : dir, std::move(data), options);
}

std::unique_ptr<Model> Model::Load(const ArtifactData& data, const LoadOptions& options) {
  return LoadArtifact("", data, options);
}

std::unique_ptr<Model> Model::LoadArtifact(const std::string& dir, ArtifactData data, const LoadOptions& options) {
  const ThreadOptions& threads = options.threads;
  std::unique_ptr<Model> model(new Model());
  Impl& m = *model->impl_;
  const bool from_dir = !dir.empty();
  m.dir = from_dir ? dir : data.name;
  auto t0 = Clock::now();

  // --- manifest
  json::Object man = ParseManifest(data.manifest_json, m.dir);
  std::string platform = Str(man, "platform", "manifest");
  std::string arch = Str(man, "arch", "manifest");
  m.device = Str(man, "device", "manifest");
  if (arch != RuntimeArch()) {
    throw Error("the artifact in " + m.dir + " was compiled for " + platform + " (" + arch +
                "), this device is " + RuntimeArch() + ": compile it with the matching --platform");
  }
  json::Object exp = AsObject(Field(man, "export", "manifest"), "export");
  std::string kind = Str(exp, "kind", "export");
  const std::string library_file = Str(exp, "library", "export");
  std::string library = m.dir + library_file;  // what dlopen gets
  std::string library_shown = library;         // what messages call it
  auto system_lib_it = exp.find(ffi::String("system_lib"));
  // iOS artifacts are linked into the app (TVM system-lib mode) instead of loaded from a file.
  const bool linked_in = system_lib_it != exp.end() && (*system_lib_it).second.try_cast<bool>().value_or(false);
  if (linked_in) library = library_shown = "the models linked into this program";
  if (kind != "shared" && !linked_in) {
    throw Error("the artifact in " + m.dir + " holds " + kind + " (" + library +
                "), not a shared library: link it first, or compile without --objects-only");
  }
  {
    std::vector<TensorInfo> main_inputs = TensorList(man, "inputs"), main_outputs = TensorList(man, "outputs");
    auto read = [&](const std::string& path) {  // a state's initial value
      if (from_dir) return ReadFile(m.dir + path, "the initial state");
      auto it = data.state_files.find(path);
      if (it == data.state_files.end()) {
        throw Error("the artifact in " + m.dir + " starts its state from " + path + ": give that file's bytes too "
                    "(ArtifactData state_files; Java: ArtifactData.stateFile(...), or ArtifactData.read)");
      }
      return it->second;
    };
    m.state.Init(manifest::StateList(man), main_inputs, main_outputs, read, m.dir);
    m.main_outputs = main_outputs.size();
  }
  m.inputs = m.state.user_inputs;
  m.outputs = m.state.user_outputs;
  m.input_set.assign(m.inputs.size(), false);

  // --- library from memory: bytes (an in-memory file), or a path or name for the dynamic linker
  if (!from_dir && !linked_in) {
    if ((data.library_bytes != nullptr) == !data.library_path.empty()) {
      throw Error("the artifact in " + m.dir + ": give its model library (" + library_file +
                  ") either as bytes or as a file or library name (ArtifactData library_bytes / library_path; Java: "
                  "library(...) / libraryPath(...)), " +
                  (data.library_path.empty() ? "neither was given" : "not both"));
    }
    if (data.library_bytes != nullptr) {
      library_shown = library_file + " of " + m.dir + " (" + std::to_string(data.library_size) + " bytes in memory)";
      m.memory_library.reset(new MemoryLibrary(data.library_bytes, data.library_size, library_file));
      library = m.memory_library->path();
    } else {
      library = library_shown = data.library_path;
    }
  }
  // a bare name is the dynamic linker's to find (an Android app's packaged library): nothing to read here
  const bool by_name = !linked_in && library.find('/') == std::string::npos;

  // --- library: check its architecture before dlopen, whose own error is misleading
  std::string lib_arch = linked_in || by_name ? RuntimeArch() : LibraryArch(library);
  if (lib_arch == "unreadable") throw Error("cannot read the model library " + library_shown);
  if (lib_arch != RuntimeArch()) {
    throw Error("the model library " + library_shown + " is built for " + lib_arch + ", this device is " +
                RuntimeArch() + ": compile the model for this device's platform");
  }
  json::Object vm_info = AsObject(Field(man, "vm", "manifest"), "vm");
  json::Array devices = Arr(vm_info, "devices", "vm");
  if (devices.empty()) throw Error("manifest.json: vm.devices is empty");
  json::Object main_dev = AsObject(devices[0], "vm.devices[0]");
  m.dev = DLDevice{static_cast<DLDeviceType>(Int(Field(main_dev, "dl_device_type", "vm.devices[0]"), "dl_device_type")),
                   static_cast<int>(Int(Field(main_dev, "id", "vm.devices[0]"), "id"))};
  LoadBackend(m.device);
  ScopeLogFilter quiet_scopes;  // until the VM is created
  try {
    if (linked_in) {
      m.lib = SystemLibrary();
    } else if (from_dir) {
      m.lib = ffi::Module::LoadFromFile(library);
    } else {  // LoadFromFile takes the format from the file's extension, which /proc/self/fd/N lacks
      m.lib = Global("ffi.Module.load_from_file.so")(ffi::String(library), ffi::String("so")).cast<ffi::Module>();
    }
  } catch (const ffi::Error& e) {
    throw Error("cannot load the model library " + library_shown + ": " + e.what());
  }
  // GPU kernels: their programs start building in the background now, overlapped with the rest of the
  // load (weights, VM); Prepare() or the first run waits for them. A build error surfaces there.
  CollectOpenCLModules(m.lib.value(), &m.opencl_modules);
  for (const ffi::Module& cl : m.opencl_modules) {
    if (auto f = cl->GetFunction(PrepareFunction(cl))) {
      try {
        (*f)(static_cast<int64_t>(m.dev.device_id), false);
      } catch (const ffi::Error&) {  // e.g. no OpenCL here: the VM's creation says so
      }
    }
  }
  // --- weights kept apart from the library (--separate-params): a file of the directory, or bytes given
  std::vector<ffi::Tensor> host_params;
  const std::string params_file = ParamsFile(man);
  if (!from_dir && params_file.empty() && data.params_bytes != nullptr) {
    throw Error("weights were given for the artifact in " + m.dir + ", but its manifest names none: the model "
                "was compiled without --separate-params (its weights are inside " + library_file + ")");
  }
  if (!params_file.empty()) {
    json::Object p = AsObject((*man.find(ffi::String("params"))).second, "params");
    std::string file = m.dir + params_file;
    std::string blob;
    if (from_dir) {
      blob = ReadFile(file, "the weights file");
      data.params_bytes = blob.data();
      data.params_size = blob.size();
    } else if (data.params_bytes == nullptr) {
      throw Error("the artifact in " + m.dir + " keeps its weights apart (" + params_file +
                  ", --separate-params): give their bytes too (ArtifactData params_bytes; Java: weights(...))");
    } else {
      file = params_file + " of " + m.dir + " (" + std::to_string(data.params_size) + " bytes in memory)";
    }
    ffi::Map<ffi::String, ffi::Tensor> loaded;
    try {  // runtime.LoadParams reads a copy (ffi::Bytes); the caller's bytes are not kept
      loaded = Global("runtime.LoadParams")(ffi::Bytes(static_cast<const char*>(data.params_bytes), data.params_size))
                   .cast<ffi::Map<ffi::String, ffi::Tensor>>();
    } catch (const ffi::Error& e) {
      throw Error("cannot read the weights in " + file + ": " + e.what());
    }
    for (const json::Value& name : Arr(p, "names", "params")) {
      auto s = name.cast<ffi::String>();
      auto it = loaded.find(s);
      if (it == loaded.end()) throw Error("the weights file " + file + " has no tensor " + std::string(s));
      host_params.push_back((*it).second);
    }
  }
  m.timings.load_ms = MsSince(t0);

  // --- VM on the device, inputs allocated once, weights copied to the device once
  auto t1 = Clock::now();
  try {
    for (size_t i = 0; i < devices.size(); ++i) {
      json::Object d = AsObject(devices[i], "vm.devices[]");
      m.vm_devices.push_back(Int(Field(d, "dl_device_type", "vm.devices[]"), "dl_device_type"));
      m.vm_devices.push_back(Int(Field(d, "id", "vm.devices[]"), "id"));
      m.vm_devices.push_back(Int(Field(d, "alloc_type", "vm.devices[]"), "alloc_type"));
    }
    m.vm = m.NewVM();
    auto entry_it = vm_info.find(ffi::String("entry"));
    if (entry_it != vm_info.end()) m.entry = std::string((*entry_it).second.cast<ffi::String>());
    auto f = m.vm.value()->GetFunction(m.entry);
    if (!f.has_value()) throw Error("the model library has no function " + m.entry);
    m.main = *f;
  } catch (const ffi::Error& e) {
    throw Error("cannot create the VM for " + m.device + " from " + library_shown + ": " + e.what());
  }
  if (!options.direct_calls) {
    m.executor = "relax vm: direct calls are turned off (LoadOptions::direct_calls)";
  } else {
    std::string why;
    try {
      why = m.direct.Prepare(m.lib.value(), m.entry);
    } catch (const std::exception& e) {
      why = std::string("its bytecode could not be read (") + e.what() + ")";
    }
    m.use_direct = why.empty();
    m.executor = why.empty() ? "direct calls" : "relax vm: " + why;
  }
  CheckThreadOptions(threads);
  if (!linked_in && threads.affinity == 0) {
    m.threads = InstallParallelPool(library, threads.threads);
    if (m.threads > 0) m.thread_pool = "tvmgen";
  }
  if (m.threads == 0) {  // TVM's pool
    if (threads.threads != 0 || threads.affinity != 0) ConfigureThreads(threads);
    m.threads = Global("runtime.NumThreads")().cast<int>();
  }
  if (m.dev.device_type == kDLVulkan && ffi::Function::GetGlobal("tvmgen.vulkan.capture_begin").has_value()) {
    m.capture_begin = Global("tvmgen.vulkan.capture_begin");  // libtvmgen_vulkan has all five or none
    m.capture_end = Global("tvmgen.vulkan.capture_end");
    m.replay = Global("tvmgen.vulkan.replay");
    m.release = Global("tvmgen.vulkan.release");
    m.hold = Global("tvmgen.vulkan.hold");
  }
  m.copy_from_bytes = Global("runtime.TVMTensorCopyFromBytes");
  m.copy_to_bytes = Global("runtime.TVMTensorCopyToBytes");
  m.host_visible_inputs = options.host_visible_inputs && m.dev.device_type == kDLOpenCL;
  try {
    for (const TensorInfo& t : m.inputs) {
      m.input_tensors.push_back(m.Alloc(t, m.host_visible_inputs ? "global.host" : nullptr));
    }
  } catch (const ffi::Error& e) {
    if (!m.host_visible_inputs) throw;
    throw Error("cannot allocate host-visible inputs (memory scope global.host) for " + m.dir + " on " +
                m.device + ": " + e.what() + " (is libtvmgen_opencl the OpenCL backend?)");
  }
  static ffi::Function copy_from_to = Global("runtime.TVMTensorCopyFromTo");
  m.state.Allocate([&m](const TensorInfo& t) { return m.Alloc(t); }, m.copy_from_bytes, copy_from_to,
                   m.capture_begin.has_value() || m.use_direct);
  for (const ffi::Tensor& hp : host_params) {
    if (m.dev.device_type == kDLCPU) {
      m.params.push_back(hp);
      continue;
    }
    TensorInfo info{"param", std::vector<int64_t>(hp.shape().begin(), hp.shape().end()),
                    std::string(ffi::DLDataTypeToString(hp.dtype())), 0};
    ffi::Tensor d = m.Alloc(info);
    copy_from_to(hp, d);
    m.params.push_back(d);
  }
  m.timings.init_ms = MsSince(t1);
  return model;
}

const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
const std::string& Model::device() const { return impl_->device; }
const Timings& Model::timings() const { return impl_->timings; }
bool Model::host_visible_inputs() const { return impl_->host_visible_inputs; }
int Model::threads() const { return impl_->threads; }
const std::string& Model::thread_pool() const { return impl_->thread_pool; }
const std::string& Model::executor() const { return impl_->executor; }

int Model::InputIndex(const std::string& name) const {
  if (impl_->state.IsStateInput(name)) {
    throw Error("\"" + name + "\" is a state input: the runtime holds its value between runs and feeds it itself; "
                "set it with SetState (Java: setState), read it with GetState, or go back to its initial value "
                "with ResetState");
  }
  for (size_t i = 0; i < impl_->inputs.size(); ++i) {
    if (impl_->inputs[i].name == name) return static_cast<int>(i);
  }
  std::string names;
  for (const TensorInfo& t : impl_->inputs) names += (names.empty() ? "" : ", ") + t.name;
  throw Error("unknown input name \"" + name + "\"; this model's inputs are: " + names);
}

void Model::SetInput(const std::string& name, const void* data, size_t nbytes) {
  SetInput(InputIndex(name), data, nbytes);
}

void Model::SetInput(int index, const void* data, size_t nbytes) {
  Impl& m = *impl_;
  const TensorInfo& t = m.inputs[CheckInputIndex(index)];
  if (nbytes != t.nbytes) {
    throw Error("input \"" + t.name + "\" (" + t.dtype + ") takes " + std::to_string(t.nbytes) +
                " bytes, " + std::to_string(nbytes) + " were given");
  }
  if (data == nullptr) throw Error("input \"" + t.name + "\": no data (null pointer)");
  if (m.copied_out_since_run || !m.copied_in_since_run) {  // a new round of copies
    m.timings.copy_in_ms = 0;
    m.copied_in_since_run = true;
    m.copied_out_since_run = false;
  }
  auto t0 = Clock::now();
  if (static_cast<size_t>(index) < m.bound_inputs.size() && m.bound_inputs[index].data != nullptr) {
    // the bound bytes are the input: copied there (Run reads them, in place or into the input's tensor)
    if (data != m.bound_inputs[index].data) std::memcpy(const_cast<void*>(m.bound_inputs[index].data), data, nbytes);
  } else {
    m.CopyIn(index, data);
  }
  m.timings.copy_in_ms += MsSince(t0);
  m.input_set[index] = true;
}

PrepareStats Model::Prepare() {
  Impl& m = *impl_;
  if (m.prepared) return m.prepare_stats;
  auto t0 = Clock::now();
  PrepareStats stats;
  for (const ffi::Module& cl : m.opencl_modules) {
    auto f = cl->GetFunction(PrepareFunction(cl));
    if (!f.has_value()) {
      throw Error("the " + std::string(cl->kind()) + " backend loaded cannot prepare kernels ahead of the first run "
                  "(is libtvmgen_" + std::string(cl->kind()) + " the backend?)");
    }
    std::string text;
    try {
      text = std::string((*f)(static_cast<int64_t>(m.dev.device_id), true).cast<ffi::String>());
    } catch (const ffi::Error& e) {
      throw Error("preparing the model's kernels on " + m.device + " failed: " + e.what());
    }
    ffi::String err;
    json::Object o = json::Parse(text, &err).cast<json::Object>();
    stats.programs += static_cast<int>(Int(Field(o, "programs", "prepare"), "programs"));
    stats.kernels += static_cast<int>(Int(Field(o, "kernels", "prepare"), "kernels"));
    stats.built += static_cast<int>(Int(Field(o, "built", "prepare"), "built"));
    stats.cached += static_cast<int>(Int(Field(o, "cached", "prepare"), "cached"));
  }
  stats.ms = MsSince(t0);
  m.timings.prepare_ms = stats.ms;
  m.prepare_stats = stats;
  m.prepared = true;
  return stats;
}

void Model::Run() {
  Impl& m = *impl_;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    if (!m.input_set[i]) throw Error("input \"" + m.inputs[i].name + "\" was never set: call SetInput first");
  }
  if (!m.copied_in_since_run) m.timings.copy_in_ms = 0;  // no SetInput since the last run: only bound inputs' copies
  const bool replaying = m.use_direct && m.direct.recorded();  // (the first run as direct calls records them)
  FillBoundInputs(replaying && m.replay_id == 0);
  std::vector<ffi::AnyView> args;
  m.state.AppendArgs(m.input_tensors, &args);
  for (const ffi::Tensor& t : m.params) args.emplace_back(t);
  // After either kind of run: its timings, then the bound outputs the kernels did not write given their bytes
  // (`kernels_wrote`: the recorded direct calls ran, with the bound tensors in their arguments)
  auto finish = [this, &m](double ms, bool kernels_wrote) {
    if (m.timings.runs == 0) m.timings.first_run_ms = ms;
    m.timings.run_ms = ms;
    m.timings.runs += 1;
    m.timings.copy_out_ms = 0;
    m.copied_in_since_run = false;
    m.copied_out_since_run = false;
    FillBoundOutputs(kernels_wrote);
  };
  auto t0 = Clock::now();
  // Vulkan: the run recorded at the third run, submitted again (the same kernels on the same buffers:
  // the results are rewritten in place); the VM runs again when the recording was dropped
  if (m.replay_id != 0) {
    bool replayed = false;
    try {
      replayed = (*m.replay)(m.replay_id, m.Owner()).cast<bool>();
    } catch (const ffi::Error& e) {
      throw Error(std::string("running the model on ") + m.device + " failed: " + e.what());
    }
    if (replayed) {
      m.AdvanceState();
      finish(MsSince(t0), false);
      return;
    }
    (*m.release)(m.replay_id);
    m.replay_id = 0;
  }
  bool capture = m.timings.runs >= 2 && m.captures < Impl::kMaxCaptures && m.capture_begin.has_value() &&
                 (*m.capture_begin)().cast<bool>();
  ffi::Any ret;
  const bool direct = m.use_direct;
  if (direct) {
    try {
      ret = m.RunDirect(args);
    } catch (const std::exception& e) {
      m.direct.Forget();
      throw Error(std::string("running the model on ") + m.device + " failed: " + e.what());
    }
  }
  try {
    if (!direct) m.main.CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);
    if (capture) {
      capture = false;
      m.captures++;
      m.replay_id = (*m.capture_end)().cast<int64_t>();
    }
    // GPU kernels are queued asynchronously: wait for them, so the run is timed as the run
    // (and not billed to the copy-out that would otherwise wait for it).
    if (m.dev.device_type != kDLCPU) {
      static ffi::Function sync = Global("runtime.Device_StreamSync");
      sync(m.dev, static_cast<int64_t>(0));
    }
  } catch (const ffi::Error& e) {
    if (capture) {  // what the VM recorded before it failed: finished as a normal run's, not kept
      try {
        int64_t id = (*m.capture_end)().cast<int64_t>();
        if (id != 0) (*m.release)(id);
      } catch (const ffi::Error&) {
      }
    }
    throw Error(std::string("running the model on ") + m.device + " failed: " + e.what());
  }
  m.results.clear();
  if (auto tensor = ret.try_cast<ffi::Tensor>()) {
    m.results.push_back(*tensor);
  } else if (auto tuple = ret.try_cast<ffi::Array<ffi::Any>>()) {
    for (const ffi::Any& item : *tuple) m.results.push_back(item.cast<ffi::Tensor>());
  } else {
    throw Error("the model returned " + std::string(ret.GetTypeKey()) + ", not tensors");
  }
  if (m.results.size() != m.main_outputs) {
    throw Error("the model returned " + std::to_string(m.results.size()) + " outputs, the manifest lists " +
                std::to_string(m.main_outputs));
  }
  m.AdvanceState();
  m.HoldResults();
  finish(MsSince(t0), replaying);
}

void Model::FillBoundInputs(bool replaying) {
  Impl& m = *impl_;
  auto t0 = Clock::now();
  bool copied = false;
  for (size_t k = 0; k < m.bound_inputs.size(); ++k) {
    Impl::BoundInput& b = m.bound_inputs[k];
    b.in_place = false;
    if (b.data == nullptr) continue;
    if (replaying && m.direct.Uses(direct::Calls::kArgument, b.argument)) {
      b.in_place = true;
      continue;
    }
    m.CopyIn(k, b.data);
    copied = true;
  }
  if (copied) m.timings.copy_in_ms += MsSince(t0);
}

void Model::BindInput(int index, const void* data, size_t nbytes) {
  Impl& m = *impl_;
  const TensorInfo& t = m.inputs[CheckInputIndex(index)];
  if (data != nullptr && nbytes != t.nbytes) {
    throw Error("input \"" + t.name + "\" (" + t.dtype + ") takes " + std::to_string(t.nbytes) + " bytes, " +
                std::to_string(nbytes) + " were given");
  }
  m.bound_inputs.resize(m.inputs.size());
  Impl::BoundInput& b = m.bound_inputs[index];
  if (b.data != nullptr && data == nullptr) m.CopyIn(index, b.data);  // unbound: the tensor keeps the bytes bound
  b = Impl::BoundInput{data, m.ArgumentOf(index)};
  if (data != nullptr) m.input_set[index] = true;
  m.direct.Bind(direct::Calls::kArgument, b.argument, m.CallerTensor(t, data));
}

bool Model::InputReadInPlace(int index) const {
  const Impl& m = *impl_;
  return index >= 0 && static_cast<size_t>(index) < m.bound_inputs.size() && m.bound_inputs[index].in_place;
}

void Model::FillBoundOutputs(bool replayed) {
  Impl& m = *impl_;
  auto t0 = Clock::now();
  bool copied = false;
  for (size_t k = 0; k < m.bound.size(); ++k) {
    Impl::Bound& b = m.bound[k];
    b.filled = b.in_place = false;
    if (b.data == nullptr) continue;
    const size_t pos = m.state.output_pos[k];
    if (replayed && m.direct.Uses(direct::Calls::kOutput, pos)) {
      b.filled = b.in_place = true;
      continue;
    }
    m.CopyOut(k, pos, b.data);
    b.filled = copied = true;
  }
  if (copied) m.timings.copy_out_ms = MsSince(t0);
}

void Model::BindOutput(int index, void* data, size_t nbytes) {
  Impl& m = *impl_;
  const TensorInfo& t = m.outputs.at(CheckOutputIndex(index));
  if (data != nullptr && nbytes != t.nbytes) {
    throw Error("output \"" + t.name + "\" (" + t.dtype + ") holds " + std::to_string(t.nbytes) +
                " bytes, the buffer bound has " + std::to_string(nbytes));
  }
  m.bound.resize(m.outputs.size());
  Impl::Bound& b = m.bound[index];
  const size_t pos = m.state.output_pos[index];
  if (b.in_place) {  // the latest run's output is only there: back into its tensor, for GetOutput
    std::memcpy(m.results[pos].data_ptr(), b.data, t.nbytes);
  }
  b = Impl::Bound{data};
  m.direct.Bind(direct::Calls::kOutput, pos, m.CallerTensor(t, data));
}

ffi::Optional<ffi::Tensor> Model::Impl::CallerTensor(const TensorInfo& t, const void* data) const {
  constexpr uintptr_t kAlignment = 64;
  if (data == nullptr || dev.device_type != kDLCPU || !state.infos().empty() ||
      reinterpret_cast<uintptr_t>(data) % kAlignment != 0) {
    return ffi::Optional<ffi::Tensor>();
  }
  return ffi::Tensor::FromNDAlloc(direct::OnMemory(), ffi::ShapeView(t.shape.data(), t.shape.size()),
                                  ffi::StringToDLDataType(t.dtype), dev, const_cast<void*>(data));
}

bool Model::OutputWrittenInPlace(int index) const {
  const Impl& m = *impl_;
  size_t k = CheckOutputIndex(index);
  return k < m.bound.size() && m.bound[k].in_place;
}

size_t Model::CheckInputIndex(int index) const {
  if (index < 0 || index >= static_cast<int>(impl_->inputs.size())) {
    throw Error("input index " + std::to_string(index) + " is out of range: the model has " +
                std::to_string(impl_->inputs.size()) + " inputs");
  }
  return static_cast<size_t>(index);
}

size_t Model::CheckOutputIndex(int index) const {
  if (index < 0 || index >= static_cast<int>(impl_->outputs.size())) {
    throw Error("output index " + std::to_string(index) + " is out of range: the model has " +
                std::to_string(impl_->outputs.size()) + " outputs");
  }
  return static_cast<size_t>(index);
}

void Model::GetOutput(int index, void* data, size_t nbytes) {
  Impl& m = *impl_;
  if (m.results.empty()) throw Error("no outputs yet: call Run first");
  const TensorInfo& t = m.outputs[CheckOutputIndex(index)];
  if (nbytes != t.nbytes) {
    throw Error("output \"" + t.name + "\" (" + t.dtype + ") holds " + std::to_string(t.nbytes) +
                " bytes, the buffer has " + std::to_string(nbytes));
  }
  m.copied_out_since_run = true;
  auto t0 = Clock::now();
  if (static_cast<size_t>(index) < m.bound.size() && m.bound[index].filled) {  // the latest run's, in BindOutput's bytes
    if (data != m.bound[index].data) std::memcpy(data, m.bound[index].data, nbytes);
  } else {
    m.CopyOut(index, m.state.output_pos[index], data);
  }
  m.timings.copy_out_ms += MsSince(t0);
}

const std::vector<TensorInfo>& Model::states() const { return impl_->state.infos(); }
int Model::StateCount() const { return static_cast<int>(impl_->state.infos().size()); }
const TensorInfo& Model::StateInfo(int index) const { return impl_->state.Info(index); }
int Model::StateIndex(const std::string& name) const { return impl_->state.Index(name); }
void Model::ResetState() {
  if (impl_->state.Reset(impl_->results)) impl_->Replaced();
}
void Model::GetState(int index, void* data, size_t nbytes) const {
  impl_->state.Get(index, data, nbytes, impl_->copy_to_bytes);
}
void Model::GetState(const std::string& name, void* data, size_t nbytes) const {
  GetState(StateIndex(name), data, nbytes);
}
void Model::SetState(int index, const void* data, size_t nbytes) {
  if (impl_->state.Set(index, data, nbytes, impl_->results)) impl_->Replaced();
}
void Model::SetState(const std::string& name, const void* data, size_t nbytes) {
  SetState(StateIndex(name), data, nbytes);
}

std::string Model::Profile(int runs) {
  Impl& m = *impl_;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    if (!m.input_set[i]) throw Error("input \"" + m.inputs[i].name + "\" was never set: call SetInput first");
  }
  auto profile = ffi::Function::GetGlobal("tvmgen.profile_vm");  // profiler.cc, when built in
  if (!profile.has_value()) throw Error("this runtime was built without the profiler (jni/src/profiler.cc)");
  ffi::Module vm = m.vm.value();
  ffi::String entry(m.entry);
  int64_t n = runs, type = m.dev.device_type, id = m.dev.device_id;
  std::vector<ffi::AnyView> args{vm, entry, n, type, id};  // views: the values above outlive the call
  m.state.AppendArgs(m.input_tensors, &args);  // the state held now, unchanged by the profiled runs
  for (const ffi::Tensor& t : m.params) args.emplace_back(t);
  ffi::Any ret;
  try {
    profile->CallPacked(args.data(), static_cast<int32_t>(args.size()), &ret);
  } catch (const ffi::Error& e) {
    throw Error(std::string("profiling the model on ") + m.device + " failed: " + e.what());
  }
  return std::string(ret.cast<ffi::String>());
}

}  // namespace tvmgen
