// The Vulkan kernel module (ffi.Module.load_from_bytes.vulkan): the SPIR-V kernels embedded in a model
// library, their pipelines and their launches.
//
// Pipelines: when a model library is loaded, its kernels' pipelines are created by background threads
// (min(8, cores)), so the driver's compiles overlap the model's loading; a launch waits for its own
// kernel's pipeline only. They are created through the module's VkPipelineCache (pipeline_cache.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/blob_reader.h"
#include "../opencl/sha256.h"
#include "pipeline_cache.h"
#include "workspace.h"

namespace tvmgen {
namespace vulkan {

struct Kernel {
  std::string name;
  std::vector<DLDataType> arg_types;
  std::vector<std::string> launch_tags;
  uint32_t workgroup[3] = {1, 1, 1};
  uint32_t buffers = 0;
  uint32_t push_bytes = 0;
  uint64_t shared_bytes = 0;  // its GLSL's `shared` arrays (SharedBytes)
  std::string spirv;
  // per binding: the shader only reads it (a `readonly` buffer in its GLSL); others count as written
  std::vector<bool> readonly;
  // created once (std::call_once): by the module's background threads, or by the first launch. `ready` is
  // set (release) after creation ended, failed or not: a launch reads the handles below only after seeing it
  // (acquire) or after its own call_once, never while a background thread is still writing them (a
  // validation layer writes the driver's handle to the output, then its own wrapped one).
  std::once_flag created;
  std::atomic<bool> ready{false};
  std::string error;  // why creating it failed (thrown at its launch)
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

// The pipelines of one kernel module: created through its VkPipelineCache, which is read from the cache
// directory first and written there once every pipeline exists (if it was not read).
struct Pipelines {
  std::vector<std::shared_ptr<Kernel>> kernels;
  std::string key;  // the cache key ("" when Vulkan is unavailable)
  VkPipelineCache cache = VK_NULL_HANDLE;
  bool from_disk = false;
  std::atomic<size_t> done{0};
  std::atomic<size_t> next{0};  // the background threads' next kernel
};

// The module blob's reader (../common/blob_reader.h), with this backend's words for a blob it cannot read.
constexpr const char* kBlobTruncated =
    "the Vulkan module in this library is truncated or of an unknown format (was it compiled by this tvmgen?)";

class VulkanModule : public ffi::ModuleObj {
 public:
  VulkanModule(std::string blob, std::map<std::string, std::shared_ptr<Kernel>> kernels)
      : blob_(std::move(blob)), kernels_(std::move(kernels)), pipelines_(std::make_shared<Pipelines>()) {
    for (auto& [name, k] : kernels_) pipelines_->kernels.push_back(k);
    StartPipelines();
  }

  const char* kind() const final { return "vulkan"; }
  int GetPropertyMask() const final { return ffi::Module::kBinarySerializable | ffi::Module::kRunnable; }
  ffi::Bytes SaveToBytes() const final { return ffi::Bytes(blob_.data(), blob_.size()); }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    if (name == "__tvmgen_vulkan_prepare") {  // (device_id, wait) -> JSON, for Model::Prepare
      std::shared_ptr<Pipelines> pl = pipelines_;
      return ffi::Function::FromTyped([pl](int64_t device_id, bool wait) -> ffi::String {
        return ffi::String(Prepare(*pl, wait));
      });
    }
    auto it = kernels_.find(std::string(name));
    if (it == kernels_.end()) return std::nullopt;
    std::shared_ptr<Kernel> k = it->second;
    ffi::ObjectPtr<ffi::Object> self = ffi::GetObjectPtr<ffi::Object>(this);
    std::shared_ptr<Pipelines> pl = pipelines_;
    return ffi::Function::FromPacked([self, k, pl](ffi::PackedArgs args, ffi::Any* rv) { Launch(*k, *pl, args); });
  }

 private:
  std::string blob_;
  std::map<std::string, std::shared_ptr<Kernel>> kernels_;
  std::shared_ptr<Pipelines> pipelines_;

  // The module's VkPipelineCache (from disk when there is a valid entry), then its pipelines created by
  // background threads. Without a Vulkan device nothing starts: the launches report it.
  void StartPipelines() {
    Workspace& w = Workspace::Global();
    if (!w.TryInit() || pipelines_->kernels.empty()) return;
    PipelineCacheDir& dir = PipelineCacheDir::Global();
    Pipelines& pl = *pipelines_;
    pl.key = PipelineCacheDir::Key(Sha256Hex(blob_), w.props);
    std::string path;
    std::string data = dir.Read(pl.key, &path);
    VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = data.size();
    ci.pInitialData = data.empty() ? nullptr : data.data();
    VkResult r = w.api.CreatePipelineCache(w.device, &ci, nullptr, &pl.cache);
    if (r != VK_SUCCESS && !data.empty()) {  // the driver refused the data: start empty
      dir.Discard(path, std::string("the driver refused it: ") + ResultName(r));
      data.clear();
      ci.initialDataSize = 0;
      ci.pInitialData = nullptr;
      r = w.api.CreatePipelineCache(w.device, &ci, nullptr, &pl.cache);
    }
    if (r != VK_SUCCESS) {
      pl.cache = VK_NULL_HANDLE;
      pl.key.clear();
    }
    pl.from_disk = !data.empty();
    (pl.from_disk ? dir.stats.hits : dir.stats.misses)++;
    if (const char* v = std::getenv("TVMGEN_VULKAN_BACKGROUND_PIPELINES")) {
      if (std::strcmp(v, "0") == 0) return;  // each pipeline at its kernel's first launch
    }
    size_t threads = std::min<size_t>({8, std::max(1u, std::thread::hardware_concurrency()), pl.kernels.size()});
    std::shared_ptr<Pipelines> keep = pipelines_;
    for (size_t t = 0; t < threads; ++t) {
      std::thread([keep]() {
        for (size_t i; (i = keep->next++) < keep->kernels.size();) {
          Kernel& k = *keep->kernels[i];
          std::call_once(k.created, [&]() { CreateRecorded(k, *keep); });
        }
      }).detach();
    }
  }

  // Every pipeline of the module created (waiting for the background threads' ones), when `wait`:
  // {"programs": 1, "kernels", "built", "cached", "ms"} (the counts of PrepareStats; pipelines "built"
  // without a cache entry, "cached" with one). A creation failure is thrown here.
  static std::string Prepare(Pipelines& pl, bool wait) {
    auto t0 = std::chrono::steady_clock::now();
    int built = 0, cached = 0;
    if (wait) {
      Workspace::Global().Check();
      for (const auto& k : pl.kernels) {
        std::call_once(k->created, [&]() { CreateRecorded(*k, pl); });
        if (k->pipeline == VK_NULL_HANDLE) {
          TVM_FFI_THROW(RuntimeError) << "Vulkan: creating the pipeline of kernel " << k->name << " failed: " << k->error;
        }
        (pl.from_disk ? cached : built)++;
      }
    }
    std::ostringstream o;
    o << "{\"programs\": 1, \"kernels\": " << pl.kernels.size() << ", \"built\": " << built << ", \"cached\": " << cached
      << ", \"ms\": " << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() << "}";
    return o.str();
  }

  // Create k's pipeline, remembering a failure for its launch; the last pipeline of the module writes
  // the pipeline cache to disk.
  static void CreateRecorded(Kernel& k, Pipelines& pl) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      Create(k, pl.cache);
    } catch (const ffi::Error& e) {
      k.error = e.message();
    } catch (const std::exception& e) {
      k.error = e.what();
    }
    k.ready.store(true, std::memory_order_release);
    PipelineCacheDir& dir = PipelineCacheDir::Global();
    dir.stats.create_us +=
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    (pl.from_disk ? dir.stats.cached : dir.stats.built)++;
    if (++pl.done == pl.kernels.size() && !pl.from_disk && pl.cache != VK_NULL_HANDLE) {
      Workspace& w = Workspace::Global();
      size_t n = 0;
      if (w.api.GetPipelineCacheData(w.device, pl.cache, &n, nullptr) == VK_SUCCESS && n > 0) {
        std::string data(n, '\0');
        if (w.api.GetPipelineCacheData(w.device, pl.cache, &n, &data[0]) == VK_SUCCESS) {
          data.resize(n);
          dir.Write(pl.key, data);
        }
      }
    }
  }

  // A work-group larger than the device takes, or more shared memory than it has, is undefined behaviour in
  // Vulkan (a driver may lose the device at the dispatch): refused before the pipeline exists, naming the
  // kernel, what it needs, what the device gives and the fix. TVMGEN_VULKAN_MAX_INVOCATIONS and
  // TVMGEN_VULKAN_MAX_SHARED_MEMORY lower the device's limits (never raise them): to check an artifact here
  // against a smaller device's.
  static void CheckWorkGroup(const Kernel& k, const Workspace& w) {
    const VkPhysicalDeviceLimits& l = w.props.limits;
    uint64_t invocations = Lowered("TVMGEN_VULKAN_MAX_INVOCATIONS", l.maxComputeWorkGroupInvocations);
    uint64_t shared = Lowered("TVMGEN_VULKAN_MAX_SHARED_MEMORY", l.maxComputeSharedMemorySize);
    uint64_t threads = uint64_t{k.workgroup[0]} * k.workgroup[1] * k.workgroup[2];
    std::ostringstream why;
    if (threads > invocations || k.workgroup[0] > l.maxComputeWorkGroupSize[0] ||
        k.workgroup[1] > l.maxComputeWorkGroupSize[1] || k.workgroup[2] > l.maxComputeWorkGroupSize[2]) {
      why << "work-groups of " << threads << " invocations (" << k.workgroup[0] << "x" << k.workgroup[1] << "x"
          << k.workgroup[2] << "), and the device takes at most " << invocations << " (maxComputeWorkGroupSize "
          << l.maxComputeWorkGroupSize[0] << "x" << l.maxComputeWorkGroupSize[1] << "x" << l.maxComputeWorkGroupSize[2]
          << ")";
    } else if (k.shared_bytes > shared) {
      why << k.shared_bytes << " bytes of shared memory per work-group, and the device has " << shared;
    }
    if (!why.str().empty()) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << " cannot run on " << w.props.deviceName
                                  << ": it needs " << why.str() << ". Fix: compile for this device's GPU family "
                                  << "(tvmgen keeps each family's kernels within its limits, docs/gpu.md)";
    }
  }

  static uint64_t Lowered(const char* env, uint64_t reported) {
    const char* v = std::getenv(env);
    if (v == nullptr || *v == '\0') return reported;
    uint64_t lower = std::strtoull(v, nullptr, 10);
    return lower > 0 && lower < reported ? lower : reported;
  }

  static void Create(Kernel& k, VkPipelineCache cache) {
    Workspace& w = Workspace::Global();
    const Api& api = w.api;
    if (k.push_bytes > w.props.limits.maxPushConstantsSize) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << " needs " << k.push_bytes
                                  << " bytes of push constants; the device has " << w.props.limits.maxPushConstantsSize;
    }
    CheckWorkGroup(k, w);
    std::vector<VkDescriptorSetLayoutBinding> bindings(k.buffers);
    for (uint32_t i = 0; i < k.buffers; ++i) {
      bindings[i] = VkDescriptorSetLayoutBinding{i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT,
                                                 nullptr};
    }
    VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dl.bindingCount = k.buffers;
    dl.pBindings = bindings.data();
    TVMGEN_VK_CHECK(api.CreateDescriptorSetLayout(w.device, &dl, nullptr, &k.set_layout), "vkCreateDescriptorSetLayout");
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, k.push_bytes};
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &k.set_layout;
    pl.pushConstantRangeCount = k.push_bytes ? 1 : 0;
    pl.pPushConstantRanges = &range;
    TVMGEN_VK_CHECK(api.CreatePipelineLayout(w.device, &pl, nullptr, &k.layout), "vkCreatePipelineLayout");
    VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sm.codeSize = k.spirv.size();
    sm.pCode = reinterpret_cast<const uint32_t*>(k.spirv.data());
    VkShaderModule shader;
    TVMGEN_VK_CHECK(api.CreateShaderModule(w.device, &sm, nullptr, &shader), "vkCreateShaderModule (" + k.name + ")");
    VkComputePipelineCreateInfo cp{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cp.stage = VkPipelineShaderStageCreateInfo{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    cp.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cp.stage.module = shader;
    cp.stage.pName = "main";
    cp.layout = k.layout;
    VkPipeline pipeline = VK_NULL_HANDLE;
    VkResult r = api.CreateComputePipelines(w.device, cache, 1, &cp, nullptr, &pipeline);
    api.DestroyShaderModule(w.device, shader, nullptr);
    TVMGEN_VK_CHECK(r, "vkCreateComputePipelines (" + k.name + ")");
    k.pipeline = pipeline;
  }

  static void Launch(Kernel& k, Pipelines& pl, ffi::PackedArgs args) {
    Workspace& w = Workspace::Global();
    w.Check();
    std::lock_guard<std::recursive_mutex> lock(w.mu);
    int64_t t0 = w.host_timing ? Workspace::NowNs() : 0;
    size_t nargs = k.arg_types.size();
    if (static_cast<size_t>(args.size()) < nargs + k.launch_tags.size()) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << " takes " << nargs + k.launch_tags.size()
                                  << " arguments, " << args.size() << " were given";
    }
    if (!k.ready.load(std::memory_order_acquire)) {
      PipelineCacheDir::Global().stats.launch_waits++;
      std::call_once(k.created, [&]() { CreateRecorded(k, pl); });
    }
    if (k.pipeline == VK_NULL_HANDLE) {
      TVM_FFI_THROW(RuntimeError) << "Vulkan: creating the pipeline of kernel " << k.name << " failed: " << k.error;
    }
    // the workspace's vectors, reused (no allocation per dispatch; Launch holds the workspace's lock)
    std::vector<Buffer*>& bufs = w.launch_bufs;
    std::vector<const Buffer*>& reads = w.launch_reads;
    std::vector<const Buffer*>& writes = w.launch_writes;
    std::vector<uint32_t>& push = w.launch_push;
    bufs.clear();
    reads.clear();
    writes.clear();
    push.clear();
    for (size_t i = 0; i < nargs; ++i) {
      const DLDataType& t = k.arg_types[i];
      if (t.code == kDLOpaqueHandle) {
        const TVMFFIAny& raw = reinterpret_cast<const TVMFFIAny*>(args.data())[i];
        void* ptr = nullptr;
        if (raw.type_index == ffi::TypeIndex::kTVMFFIOpaquePtr) {
          ptr = raw.v_ptr;
        } else if (raw.type_index == ffi::TypeIndex::kTVMFFIDLTensorPtr) {
          ptr = static_cast<DLTensor*>(raw.v_ptr)->data;
        } else if (auto tensor = args[i].try_cast<ffi::Tensor>()) {
          ptr = tensor->data_ptr();
        }
        Buffer* b = w.FindArgument(ptr, i, k.name);
        size_t binding = bufs.size();
        bufs.push_back(b);
        (binding < k.readonly.size() && k.readonly[binding] ? reads : writes).push_back(b);
      } else if (t.code == kDLFloat) {
        float f = static_cast<float>(args[i].cast<double>());
        uint32_t u;
        std::memcpy(&u, &f, 4);
        push.push_back(u);
      } else {
        int64_t v = 0;
        if (auto x = args[i].try_cast<int64_t>()) {
          v = *x;
        } else {
          v = args[i].cast<bool>();
        }
        if (v > INT32_MAX || v < INT32_MIN) {
          TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << ": argument " << i << " = " << v
                                      << " does not fit the 32-bit integers tvmgen's Vulkan kernels use";
        }
        push.push_back(static_cast<uint32_t>(static_cast<int32_t>(v)));
      }
    }
    uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
    for (size_t j = 0; j < k.launch_tags.size(); ++j) {
      const std::string& tag = k.launch_tags[j];
      int64_t v = args[nargs + j].cast<int64_t>();
      if (tag.size() == 10 && tag.rfind("blockIdx.", 0) == 0) {
        grid[tag[9] - 'x'] = static_cast<uint32_t>(std::max<int64_t>(v, 1));
      } else if (tag.size() == 11 && tag.rfind("threadIdx.", 0) == 0) {
        block[tag[10] - 'x'] = static_cast<uint32_t>(std::max<int64_t>(v, 1));
      }
    }
    for (int d = 0; d < 3; ++d) {
      if (block[d] != k.workgroup[d]) {
        TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k.name << ": launched with " << block[0] << "x" << block[1]
                                    << "x" << block[2] << " threads, compiled for " << k.workgroup[0] << "x"
                                    << k.workgroup[1] << "x" << k.workgroup[2];
      }
    }
    VkDescriptorSet set = w.DescriptorSet(k.set_layout, bufs);
    w.BeginTimed(k.name);  // first: it may submit what was recorded before (its query pool full)
    w.Begin();
    w.BarrierFor(reads, writes);
    w.api.CmdBindPipeline(w.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k.pipeline);
    w.api.CmdBindDescriptorSets(w.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, k.layout, 0, 1, &set, 0, nullptr);
    if (!push.empty()) {
      w.api.CmdPushConstants(w.cmd, k.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                             static_cast<uint32_t>(push.size() * 4), push.data());
    }
    w.WriteStart();
    w.api.CmdDispatch(w.cmd, grid[0], grid[1], grid[2]);
    w.EndTimed();
    if (w.host_timing) w.host.launch_ns += Workspace::NowNs() - t0;  // before Dispatched: its submits count there
    w.Dispatched();
  }
};

// The bytes of the `shared` arrays a kernel's GLSL declares (tvmgen's printer: "shared TYPE NAME[N];" at the
// start of a line), at each GLSL type's size; an unknown type counts as 16 bytes an element (a vec4's).
uint64_t SharedBytes(const std::string& glsl) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"float", 4}, {"int", 4},   {"uint", 4},   {"bool", 4},  {"float16_t", 2}, {"double", 8}, {"vec2", 8},
      {"vec3", 12}, {"vec4", 16}, {"ivec2", 8},  {"ivec3", 12}, {"ivec4", 16},   {"uvec2", 8},  {"uvec3", 12},
      {"uvec4", 16}};
  uint64_t total = 0;
  std::istringstream lines(glsl);
  std::string line;
  while (std::getline(lines, line)) {
    size_t at = line.find_first_not_of(" \t");
    if (at == std::string::npos || line.compare(at, 7, "shared ") != 0) continue;
    std::istringstream words(line.substr(at + 7));
    std::string type, name;
    words >> type >> name;
    size_t open = name.find('['), close = name.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    uint64_t n = std::strtoull(name.c_str() + open + 1, nullptr, 10);
    auto size = kSizes.find(type);
    total += n * (size == kSizes.end() ? 16 : size->second);
  }
  return total;
}

// Which of a kernel's `n` bindings its GLSL declares `readonly` in every declaration of the binding
// (tvmgen's printer: "layout(std430, set = 0, binding = I) restrict [readonly ]buffer ..."; a vec4 view
// is a second declaration of the same binding). Bindings it does not declare count as written.
std::vector<bool> ReadonlyBindings(const std::string& glsl, uint32_t n) {
  std::vector<int> state(n, 0);  // 0: not seen, 1: read only so far, 2: written
  const std::string head = "layout(std430, set = 0, binding = ";
  for (size_t at = glsl.find(head); at != std::string::npos; at = glsl.find(head, at + 1)) {
    size_t end = glsl.find('\n', at);
    std::string line = glsl.substr(at, end == std::string::npos ? std::string::npos : end - at);
    unsigned long b = std::strtoul(line.c_str() + head.size(), nullptr, 10);
    if (b >= n) continue;
    bool ro = line.find(" readonly buffer ") != std::string::npos;
    state[b] = (ro && state[b] != 2) ? 1 : 2;
  }
  std::vector<bool> out(n);
  for (uint32_t i = 0; i < n; ++i) out[i] = state[i] == 1;
  return out;
}

ffi::Module LoadFromBytes(const ffi::Bytes& bytes) {
  std::string blob(bytes.data(), bytes.size());
  BlobReader r(blob.data(), blob.size(), kBlobTruncated);
  std::string magic(r.Take(8), 8);
  if (magic != "TVMGENVK") {
    TVM_FFI_THROW(RuntimeError) << "the Vulkan module in this library is not tvmgen's (no TVMGENVK header): "
                                << "compile the model with tvmgen compile --device vulkan";
  }
  r.Pod<uint64_t>();  // total length
  uint32_t version = r.Pod<uint32_t>();
  if (version != 1) TVM_FFI_THROW(RuntimeError) << "Vulkan module format " << version << " is not supported";
  uint32_t count = r.Pod<uint32_t>();
  std::map<std::string, std::shared_ptr<Kernel>> kernels;
  for (uint32_t i = 0; i < count; ++i) {
    auto k = std::make_shared<Kernel>();
    k->name = r.Str();
    uint32_t na = r.Pod<uint32_t>();
    for (uint32_t j = 0; j < na; ++j) {
      DLDataType t;
      t.code = r.Pod<uint8_t>();
      t.bits = r.Pod<uint8_t>();
      t.lanes = r.Pod<uint16_t>();
      k->arg_types.push_back(t);
    }
    uint32_t nt = r.Pod<uint32_t>();
    for (uint32_t j = 0; j < nt; ++j) k->launch_tags.push_back(r.Str());
    for (int d = 0; d < 3; ++d) k->workgroup[d] = r.Pod<uint32_t>();
    k->buffers = r.Pod<uint32_t>();
    k->push_bytes = r.Pod<uint32_t>();
    k->spirv = r.Str();
    std::string glsl = r.Str();
    k->readonly = ReadonlyBindings(glsl, k->buffers);  // from the GLSL source
    k->shared_bytes = SharedBytes(glsl);
    // TVMGEN_VULKAN_SPIRV_DIR: <dir>/<kernel>.spv replaces the kernel's SPIR-V (same bindings and push
    // constants): to time a hand-edited shader on a device without rebuilding the model
    if (const char* dir = std::getenv("TVMGEN_VULKAN_SPIRV_DIR")) {
      std::ifstream f(std::string(dir) + "/" + k->name + ".spv", std::ios::binary);
      if (f) {
        k->spirv.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        if (LogOn()) std::fprintf(stderr, "tvmgen-vulkan: %s from %s\n", k->name.c_str(), dir);
      }
    }
    if (k->spirv.size() % 4 != 0) TVM_FFI_THROW(RuntimeError) << "Vulkan kernel " << k->name << ": bad SPIR-V size";
    kernels[k->name] = k;
  }
  return ffi::Module(ffi::make_object<VulkanModule>(std::move(blob), std::move(kernels)));
}

}  // namespace vulkan
}  // namespace tvmgen
