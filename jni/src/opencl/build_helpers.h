// Building a module's programs in helper processes (tvmgen-clbuild), for drivers that build the programs of
// one process one at a time (NVIDIA's OpenCL): each helper creates its own context on the same platform and
// device, builds the programs it is given with the same options and stores their binaries in tvmgen's kernel
// cache under the keys this process uses; this process then loads them from the cache (the warm path).
// Not on Android, where an app cannot portably start GPU processes: there every build stays in-process.
#ifndef TVMGEN_OPENCL_BUILD_HELPERS_H_
#define TVMGEN_OPENCL_BUILD_HELPERS_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "opencl_common.h"

namespace tvmgen {
namespace opencl {

// How many helper processes may build one module's programs on this device (0: none, every build in this
// process). TVMGEN_OPENCL_BUILD_PROCESSES=N (0 turns it off; N > 0 forces it on any platform), else
// min(5, cores - 1) where the driver serializes a process's builds (NVIDIA), else 0; always 0 on Android.
// Why 5: NVIDIA creates the contexts of processes that open the device together, about 110 ms per process
// before any is ready (so helpers now open it one after the other, see HelperBuilds::Start); 7 measured no
// better with that either.
int HelperProcesses(const DeviceInfo& dev, const std::string& platform);
// The same where the driver serializes (or the variable is set): known before the platform is.
int PotentialHelperProcesses();
// Whether helpers are likely before the platform is known: PotentialHelperProcesses() > 0, and
// TVMGEN_OPENCL_BUILD_PROCESSES set or NVIDIA's kernel driver loaded (/proc/driver/nvidia/version), and not
// TVMGEN_OPENCL_HELPERS_EARLY=0. A cold start then starts its helpers before this process's driver start
// (~0.3 s on NVIDIA: the platform and the context), see Builds::StartEarly in opencl_module.cc.
bool HelpersLikelyEarly();

// The weight of one kernel for balancing programs: its definition's bytes plus a fixed cost per kernel.
size_t KernelWeight(size_t definition_bytes);

// The bytes of an OpenCL definition with its `#pragma unroll` loops written out: each line counts once per
// iteration of the constant-count loops under the pragma around it (tvmgen's kernels keep TVM's unrolled
// loops as such loops, compiler/gpu/opencl_loops.py; the driver compiles them unrolled, so the text alone would
// understate its work ten times). Text without the pragma: its size.
size_t UnrolledBytes(const std::string& definition);

// Weight per program on the helper path (TVMGEN_OPENCL_GROUP_KB, default 192 KB: about 0.4 s of NVIDIA's
// compiler; smaller programs balance the helpers better, fewer load faster in a warm start).
size_t GroupWeight();

// At most this many programs on the helper path (TVMGEN_OPENCL_MAX_PROGRAMS, default 12: two for each of the six
// builders, the model's process and five helpers). Each program costs NVIDIA's compiler ~0.1 s on its own (a
// kernel of a few lines alone takes that), so a heavier model gets larger programs rather than more of them.
size_t MaxHelperPrograms();

// One start's helper processes, sharing a queue of programs with this process. Start() writes the sources
// to a private temporary directory and spawns the helpers; each creates its context, then takes the queue's
// programs in order (opening the device one after the other: --after), claiming each by creating "<source>.claim" there (O_EXCL: one taker, this process
// included, see Claim), and reports "claim J" / "done J" (stored in the cache) on a pipe, read by Follow.
class HelperBuilds {
 public:
  // sources: the queue. cache_dir: tvmgen's kernel cache directory ("" when it is off: the helpers then write
  // into the temporary directory, see LoadDir()). log: the helpers print their timings. False and *why when
  // none starts (those that did keep going).
  bool Start(const std::vector<const std::string*>& sources, int helpers, int device_id,
             const std::string& cache_dir, bool log, std::string* why);
  // Takes queue entry j for this process: false when a helper has it.
  bool Claim(size_t j);
  // Reads helper k's reports until it exits: ready() once its context is made, then claimed(j) and stored(j)
  // for each program. Returns "" when it exited normally, else why not (exit status, signal).
  std::string Follow(size_t k, const std::function<void()>& ready, const std::function<void(size_t)>& claimed,
                     const std::function<void(size_t)>& stored);
  // Where this process finds the helpers' binaries: the cache directory, or the temporary one.
  const std::string& LoadDir() const { return load_dir_; }
  size_t size() const { return pids_.size(); }
  const std::string& Executable() const { return exe_; }
  // Ends the helpers still running (every program is built: they have nothing left to claim).
  void StopAll();
  ~HelperBuilds();  // waits for the helpers, removes the temporary directory

 private:
  std::string Source(size_t j) const { return tmp_ + "/p" + std::to_string(j) + ".cl"; }
  std::string tmp_, load_dir_, exe_;
  std::vector<pid_t> pids_;
  std::vector<int> pipes_;  // read ends
  std::vector<bool> waited_;
  std::atomic<bool> stopping_{false};  // StopAll ended them: not a failure
};

}  // namespace opencl
}  // namespace tvmgen

// tvmgen-clbuild's main: tvmgen-clbuild --cache-dir DIR --device N --options OPTS [--log] [--after FILE]
// [--ready-file FILE] SOURCE.cl... Opens the device (once FILE exists with --after: the previous helper's
// --ready-file, created once its device is open; at most 3 s of waiting), then builds each source file it can claim (SOURCE.cl.claim created, see HelperBuilds) and
// stores its binary in DIR, printing "claim J" and "done J" (J: the file's position) on stdout. Exit 0 when
// every claimed one was stored.
extern "C" int TVMGenOpenCLBuildMain(int argc, char** argv);

#endif  // TVMGEN_OPENCL_BUILD_HELPERS_H_
