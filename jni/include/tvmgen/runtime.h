/*!
 * tvmgen device runtime: load an artifact directory written by `tvmgen compile`, run it with
 * TVM's Relax VM on the manifest's device, and move tensors in and out as host bytes.
 *
 * Data only crosses the host/device boundary through TVM's CopyFromBytes / CopyToBytes, so
 * device memory is never dereferenced (on a phone GPU that fails with CL_INVALID_MEM_OBJECT).
 * Builds against the tvm-ffi headers and the TVM runtime's registered functions only.
 */
#ifndef TVMGEN_RUNTIME_H_
#define TVMGEN_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tvmgen {

/*! \brief Every failure: TVM's message plus what tvmgen was doing (which file, which input). */
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/*! \brief An input or output as the manifest describes it. */
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // numpy-style name: float32, int64, uint8, bool ...
  size_t nbytes = 0;
};

/*! \brief Milliseconds per stage. copy_in/run/copy_out are those of the latest run. */
struct Timings {
  double load_ms = 0;       // manifest, library and weights read
  double init_ms = 0;       // VM created for the device, inputs allocated, weights on the device
  double first_run_ms = 0;  // the first Run(): includes one-time work (kernel compilation on GPUs, unless prepared)
  double prepare_ms = 0;    // Prepare(): GPU kernels built or loaded from the kernel cache (0 if not called)
  double copy_in_ms = 0;    // SetInput calls since the previous Run()
  double run_ms = 0;        // the latest Run()
  double copy_out_ms = 0;   // GetOutput calls after the latest Run()
  int runs = 0;
  /*! \brief The timings as a JSON object. */
  std::string ToJson() const;
};

/*!
 * \brief Make `device` (opencl, cuda, ...) available to the TVM runtime: tvmgen's own backend library
 * (libtvmgen_opencl, beside libtvmgen_runtime) first, then TVM's libtvm_runtime_<device>. Throws Error
 * naming every library tried when none registers the device.
 */
void LoadBackend(const std::string& device);

/*! \brief What Model::Prepare did: GPU programs (each holding kernels) built from source or loaded from the cache. */
struct PrepareStats {
  int programs = 0;
  int kernels = 0;
  int built = 0;   // compiled by the driver (and stored in the kernel cache)
  int cached = 0;  // loaded from the kernel cache
  double ms = 0;
  /*! \brief The stats as a JSON object. */
  std::string ToJson() const;
};

/*!
 * \brief CPU thread settings, applied by Model::Load.
 *
 * With affinity 0 a model library compiled by tvmgen runs its parallel loops on its own launcher
 * (jni/src/parallel/parallel_pool.cc: threads claim chunks, so a descheduled thread does not hold up a
 * kernel) with `threads` threads. A big/little affinity, a library without that launcher or
 * TVMGEN_THREAD_POOL=tvm in the environment uses TVM's thread pool (runtime.config_threadpool).
 */
struct ThreadOptions {
  int threads = 0;  // 0: $TVM_NUM_THREADS, else one per physical core among the big cores
  // TVM's AffinityMode: 1 = big cores, -1 = little cores, 0 = no preference.
  int affinity = 0;
};

/*! \brief Everything Model::Load takes (the ThreadOptions overload is Load with the defaults here). */
struct LoadOptions {
  ThreadOptions threads;
  /*!
   * \brief OpenCL only: allocate the input tensors host-visible (memory scope "global.host",
   * CL_MEM_ALLOC_HOST_PTR) so SetInput maps them and copies with memcpy instead of
   * clEnqueueWriteBuffer. Ignored on other devices (Model::host_visible_inputs() says false).
   */
  bool host_visible_inputs = false;
  /*!
   * \brief Run main as the fixed list of its kernel calls (on a GPU, the host functions that launch its
   * kernels), recorded on the first run, with its intermediates allocated once (jni/src/direct_calls.h),
   * instead of the Relax VM on every run. A model whose main branches or calls a runtime function that must
   * run every time keeps the VM; executor() says which ran and why. false: always the VM.
   */
  bool direct_calls = true;
};

/*! \brief The process's resident memory (VmRSS, and its peak VmHWM, from /proc/self/status; 0 elsewhere). */
struct ResidentMemory {
  int64_t rss_bytes = 0;
  int64_t peak_bytes = 0;
};
ResidentMemory ReadResidentMemory();

/*! \brief Apply settings to TVM's thread pool (runtime.config_threadpool); see ThreadOptions. */
void ConfigureThreads(const ThreadOptions& options);

/*!
 * \brief Whether a model is linked into this program (TVM system-lib mode, how iOS apps carry models:
 * an artifact whose manifest says export.system_lib is loaded from the program itself, not from a file).
 */
bool HasLinkedModel();

/*! \brief The architecture this runtime was built for: x86_64, aarch64, arm. */
const char* RuntimeArch();

/*!
 * \brief The machine an ELF file is built for (x86_64, aarch64, arm, ...), read from its header;
 * "not-elf" or "unreadable" otherwise. Checked before dlopen, whose own error is misleading.
 */
std::string LibraryArch(const std::string& path);

/*!
 * \brief An artifact held by the app rather than in a directory: its manifest's text, its weights' bytes
 * (decrypted or downloaded by the app) and its model library as bytes or as a name for the dynamic linker.
 * Model::Load reads it all during the call and keeps no pointer into it: the caller may free (or wipe)
 * its buffers as soon as Load returns.
 */
struct ArtifactData {
  /*! \brief What messages call the artifact ("the artifact in NAME"): an asset directory, a URL, ... */
  std::string name = "memory";
  /*! \brief manifest.json's text. */
  std::string manifest_json;
  /*!
   * \brief The model library's bytes (manifest export.library). Linux and Android: written to an anonymous
   * in-memory file (memfd_create, no file on any file system) and dlopen'ed from /proc/self/fd/N.
   */
  const void* library_bytes = nullptr;
  size_t library_size = 0;
  /*!
   * \brief Instead of library_bytes: a library file, or a bare library name ("libmodel_cpu.so") that the
   * dynamic linker looks up. On Android that is how a model library packaged in the APK's lib/<abi>/
   * loads in place: stored uncompressed and 16 KB-aligned, the platform's linker maps it straight from the APK.
   */
  std::string library_path;
  /*! \brief The weights' bytes (manifest params.file, written by --separate-params); none otherwise. */
  const void* params_bytes = nullptr;
  size_t params_size = 0;
  /*!
   * \brief A streaming model's initial state values (the manifest's state[].initial, .npy files such as
   * state/0.npy; ArtifactFiles::state lists them), by that path: each file's bytes. Copied during Load.
   */
  std::map<std::string, std::string> state_files;
};

/*! \brief The files an artifact's manifest names besides itself: its model library and its weights ("" if none). */
struct ArtifactFiles {
  std::string library;
  std::string params;
  std::vector<std::string> state;  // the initial state values (.npy) of a streaming model
};
/*! \brief Read from manifest.json's text, so an app knows which files to fetch for ArtifactData. */
ArtifactFiles ReadArtifactFiles(const std::string& manifest_json);

/*!
 * \brief A loaded artifact, ready to run. Not thread-safe: one caller at a time.
 *
 * A streaming model (the manifest's "state" list) carries state tensors from one run to the next: main
 * reads each as an input and returns its next value as an output. The model holds them on its device,
 * from their initial values (the manifest's .npy, else zeros): Run() feeds the values held to the state
 * inputs and then holds the state outputs, without a copy through the host. inputs(), outputs() and their
 * indexes are the model's own, without the state tensors (a stateless model's are all of main's); the state
 * has its own calls (StateCount ... SetState), each state named after its input.
 */
class Model {
 public:
  /*!
   * \brief Load the artifact in `dir` (manifest.json, library, optional params).
   * Checks the manifest's platform and the library's architecture before loading it.
   */
  static std::unique_ptr<Model> Load(const std::string& dir, const ThreadOptions& threads = {});
  /*! \brief Load with options beyond the thread pool (see LoadOptions). */
  static std::unique_ptr<Model> Load(const std::string& dir, const LoadOptions& options);
  /*!
   * \brief Load an artifact from memory (see ArtifactData): no file is read for the manifest or the weights,
   * and none is written. The same checks as a directory's (platform, library architecture).
   */
  static std::unique_ptr<Model> Load(const ArtifactData& data, const LoadOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  /*! \brief The device the model runs on: cpu, opencl, cuda, ... */
  const std::string& device() const;
  /*! \brief CPU threads for parallel loops, and whose pool runs them: "tvmgen" or "tvm". */
  int threads() const;
  const std::string& thread_pool() const;
  /*!
   * \brief What runs main: "direct calls" (LoadOptions::direct_calls), or "relax vm" followed by the reason
   * the direct calls are not used ("relax vm: main branches (If/Goto) ...").
   */
  const std::string& executor() const;
  /*! \brief Whether the inputs are host-visible buffers (LoadOptions::host_visible_inputs on OpenCL). */
  bool host_visible_inputs() const;
  /*!
   * \brief Index of the input called `name`; throws Error listing the inputs when unknown, and one that points
   * to SetState when `name` is a state input.
   */
  int InputIndex(const std::string& name) const;

  /*! \brief Copy `nbytes` host bytes into input `index` (must equal the input's size). */
  void SetInput(int index, const void* data, size_t nbytes);
  void SetInput(const std::string& name, const void* data, size_t nbytes);
  /*!
   * \brief Every later Run reads input `index` from the `nbytes` host bytes at `data` (the input's size, kept alive
   * by the caller, who writes each frame there before Run); `data` nullptr: no longer (the input keeps the bytes
   * bound until then). Where the model runs on the CPU as direct calls without state, `data` is 64-byte aligned
   * and no builtin keeps a view of the input, the kernels read it there, with no copy, from the second Run on;
   * otherwise Run copies it in first. SetInput on a bound input copies into `data`. InputReadInPlace says
   * which the latest Run did.
   */
  void BindInput(int index, const void* data, size_t nbytes);
  /*! \brief Whether the latest Run's kernels read input `index` straight from BindInput's bytes. */
  bool InputReadInPlace(int index) const;
  /*!
   * \brief Build the model's GPU kernels now (or load them from the kernel cache), so that the first Run()
   * compiles nothing: call it behind a splash screen, or once at install to fill the cache. Load starts
   * these builds in the background already; Prepare waits for them (a build error is thrown here).
   * Nothing to do on the CPU (all zero). Calling it again costs nothing.
   */
  PrepareStats Prepare();
  /*! \brief Run `main` on the inputs set so far (and the state held, which it then advances). */
  void Run();
  /*! \brief Copy output `index` of the latest run into `nbytes` host bytes (none when they are BindOutput's). */
  void GetOutput(int index, void* data, size_t nbytes);
  /*!
   * \brief Every later Run leaves output `index` in the `nbytes` host bytes at `data` (the output's size, kept
   * alive by the caller and left alone during Run); `data` nullptr: no longer. Where the model runs on the CPU
   * as direct calls (executor() "direct calls") without state, `data` is 64-byte aligned and a kernel writes
   * the output as a buffer of the run's own (not a weight, an input, a constant or a view), that kernel writes
   * it there, with no copy, from the second Run on; otherwise Run copies it there. OutputWrittenInPlace says
   * which the latest Run did. GetOutput into `data` itself then copies nothing.
   */
  void BindOutput(int index, void* data, size_t nbytes);
  /*! \brief Whether the latest Run's kernels wrote output `index` straight into BindOutput's bytes. */
  bool OutputWrittenInPlace(int index) const;

  const Timings& timings() const;

  // ---- state of a streaming model (none: StateCount() is 0, and the rest has nothing to do)
  /*! \brief The state tensors, each named after the state input it is fed to. */
  const std::vector<TensorInfo>& states() const;
  int StateCount() const;
  /*! \brief states()[index]; Error when out of range. */
  const TensorInfo& StateInfo(int index) const;
  /*! \brief Index of the state fed to input `name`; Error listing the states when unknown. */
  int StateIndex(const std::string& name) const;
  /*! \brief Every state back to its initial value (the start of a new stream). */
  void ResetState();
  /*! \brief Copy the value held now into `nbytes` host bytes (must equal the state's size). */
  void GetState(int index, void* data, size_t nbytes) const;
  void GetState(const std::string& name, void* data, size_t nbytes) const;
  /*! \brief Replace the value held with `nbytes` host bytes (must equal the state's size); the next Run reads it. */
  void SetState(int index, const void* data, size_t nbytes);
  void SetState(const std::string& name, const void* data, size_t nbytes);

  /*!
   * \brief Run the model `runs` times plain and `runs` times with every VM call timed (interleaved),
   * on the inputs set so far. Returns JSON: runs, clock, whole_run_ms (median plain run),
   * kernels_median_ms (the kernels' sum in the median profiled run) and counts {name: [calls, total_ns]}
   * over the profiled runs. The state held does not change. Needs profiler.cc in the library (Error otherwise).
   */
  std::string Profile(int runs);

 private:
  Model();
  // Both Loads: `dir` is the artifact directory ("" for ArtifactData), whose files fill in `data`.
  static std::unique_ptr<Model> LoadArtifact(const std::string& dir, ArtifactData data, const LoadOptions& options);
  // Before a run: BindInput's bytes copied into the inputs the kernels will not read there (`replaying`: direct calls)
  void FillBoundInputs(bool replaying);
  // After a run: BindOutput's bytes given the outputs the kernels did not write there (`replayed`: direct calls replayed)
  void FillBoundOutputs(bool replayed);
  // `index` when it names an input / an output, else Error
  size_t CheckInputIndex(int index) const;
  size_t CheckOutputIndex(int index) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tvmgen

#endif  // TVMGEN_RUNTIME_H_
