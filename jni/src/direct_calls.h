#pragma once
// Direct calls: a model's main run as the fixed list of its kernel calls, on buffers allocated once.
//
// The Relax VM interprets main's bytecode on every run: each instruction is a call through a function
// table, and each run allocates every intermediate's storage and tensor objects again and frees them at the
// end. For a model of a few microseconds that is half of a run. When main is one straight line (no branch,
// no call of another VM function) and every function it calls is either one of the library's kernels or a
// builtin whose result depends only on shapes and on which buffers exist (shape checks, allocations,
// tuples, views), the calls are the same on every run: the first run goes through a VM of its own with an
// instrument that keeps each kernel call and its argument values, and every later run makes those kernel
// calls only. The inputs, the weights, the held state and the intermediates are then the same tensors from
// run to run. The VM's memory plan is kept as it is (a storage shared by tensors whose lives do not overlap
// stays shared), and the intermediates stay allocated for the model's life.
//
// Only the runtime's public interfaces are used: the executable's text (as_text) for the straight-line
// check, the VM module's set_instrument for the recording.

#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace direct {

namespace ffi = tvm::ffi;

// Builtins whose results depend on shapes and on which buffers exist, never on the tensors' values: run once,
// while the calls are recorded. (A view of a buffer that stays is a view that stays.)
inline bool RunsOnce(const std::string& name) {
  static const std::set<std::string> kOnce = {
      "vm.builtin.check_tensor_info", "vm.builtin.check_shape_info", "vm.builtin.check_prim_value_info",
      "vm.builtin.check_tuple_info",  "vm.builtin.match_shape",      "vm.builtin.alloc_storage",
      "vm.builtin.alloc_tensor",      "vm.builtin.null_value",       "vm.builtin.make_tuple",
      "vm.builtin.reshape"};
  return kOnce.count(name) > 0;
}

/*!
 * \brief What `entry` calls, read from the executable's text (VMExecutable's as_text): each call's function
 * name, in order. `why_not` gets the reason the function is not one straight line of calls of packed
 * functions ("" when it is).
 */
inline std::vector<std::string> ReadCalls(const std::string& text, const std::string& entry, std::string* why_not) {
  std::vector<std::string> calls;
  std::set<std::string> packed;  // "@NAME packed_func;": the functions that are not the VM's own
  std::istringstream lines(text);
  std::string line;
  bool in_entry = false, found = false, returned = false;
  while (std::getline(lines, line)) {
    if (line.rfind('@', 0) == 0) {
      in_entry = line == "@" + entry + ":";
      found = found || in_entry;
      const std::string suffix = " packed_func;";
      if (line.size() > suffix.size() && line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0) {
        packed.insert(line.substr(1, line.size() - 1 - suffix.size()));
      }
      continue;
    }
    if (!in_entry || line.empty()) continue;
    std::istringstream words(line);
    std::string op, name;
    words >> op >> name;
    if (op == "call") {
      calls.push_back(name);
    } else if (op == "ret") {
      returned = true;
    } else {
      *why_not = entry + " branches (" + op + "): its calls can differ from run to run";
      return {};
    }
  }
  if (!found || !returned) {
    *why_not = "the executable's text has no function " + entry + " ending in ret";
    return {};
  }
  for (const std::string& c : calls) {
    if (!packed.count(c)) {
      *why_not = entry + " calls " + c + ", a function of the VM itself";
      return {};
    }
  }
  why_not->clear();
  return calls;
}

class Calls {
 public:
  /*!
   * \brief Whether `entry` of the model library `lib` can run as direct calls: "" when it can, else the
   * reason (the first call that needs the VM). Nothing runs.
   */
  std::string Prepare(const ffi::Module& lib, const std::string& entry) {
    auto as_text = lib->GetFunction("as_text", true);
    if (!as_text.has_value()) return "the library has no VM executable whose bytecode can be read (as_text)";
    std::string why_not;
    std::vector<std::string> calls = ReadCalls(std::string((*as_text)().cast<ffi::String>()), entry, &why_not);
    if (!why_not.empty()) return why_not;
    for (const std::string& name : calls) {
      if (RunsOnce(name) || kernels_.count(name)) continue;
      // A kernel is the library's own function. A function of the runtime's registry may depend on more
      // than its arguments (a random number, a clock, a copy made on the fly): the VM keeps those.
      ffi::Optional<ffi::Function> kernel;
      if (name.rfind("vm.builtin.", 0) != 0) kernel = lib->GetFunction(name, true);
      if (!kernel.has_value()) return entry + " calls " + name + ", a runtime function that has to run on every call";
      kernels_.emplace(name, *kernel);
    }
    entry_ = entry;
    return "";
  }

  bool recorded() const { return recorded_; }

  /*! \brief Forget the recorded calls (an argument tensor was replaced): the next run records them again. */
  void Forget() {
    calls_.clear();
    result_ = ffi::Any();
    recorded_ = false;
  }

  /*!
   * \brief The first run, on `recorder`, a VM of the model's own (made and initialised as the model's, not
   * used for anything else): main with `args`, which must be the same tensors on every later run, each
   * kernel call kept with its arguments. Returns what main returns.
   */
  ffi::Any Record(const ffi::Module& recorder, const ffi::AnyView* args, int num_args) {
    Forget();
    std::vector<Call> calls;
    std::string refused;
    // The VM's instrument: (function, its name, before the call?, the return value, the call's arguments...).
    // Its return value 0 lets the call run.
    ffi::Function keep = ffi::Function::FromPacked([&](ffi::PackedArgs a, ffi::Any* rv) {
      *rv = static_cast<int64_t>(0);
      if (!a[2].cast<bool>()) return;
      std::string name(a[1].cast<ffi::String>());
      if (RunsOnce(name)) return;
      auto it = kernels_.find(name);
      if (it == kernels_.end()) {
        if (refused.empty()) refused = entry_ + " called " + name + ", which its bytecode did not show";
        return;
      }
      Call c;
      c.f = it->second;
      for (int i = 4; i < a.size(); ++i) {
        // the instrument sees a dtype argument as its name: a kernel that takes one is left to the VM
        if (a[i].try_cast<ffi::String>().has_value() && refused.empty()) {
          refused = "the kernel " + name + " takes a string or dtype argument";
        }
        c.values.emplace_back(a[i]);
      }
      calls.push_back(std::move(c));
    });
    recorder->GetFunction("set_instrument").value()(keep);
    ffi::Any result;
    recorder->GetFunction(entry_).value().CallPacked(args, num_args, &result);
    if (!refused.empty()) throw Refused{refused, result};
    for (Call& c : calls) c.views.assign(c.values.begin(), c.values.end());
    calls_ = std::move(calls);
    result_ = result;
    recorded_ = true;
    return result;
  }

  /*! \brief A later run: the recorded kernel calls, in order. Returns what main returned when recorded. */
  const ffi::Any& Replay() const {
    ffi::Any ignored;
    for (const Call& c : calls_) c.f.CallPacked(c.views.data(), static_cast<int32_t>(c.views.size()), &ignored);
    return result_;
  }

  /*! \brief Record's run went through but cannot be replayed; `result` is that run's result. */
  struct Refused {
    std::string why;
    ffi::Any result;
  };

 private:
  struct Call {
    ffi::Function f;
    std::vector<ffi::Any> values;     // owns the arguments (tensors, shapes, scalars)
    std::vector<ffi::AnyView> views;  // what CallPacked takes: views of `values`
  };

  std::string entry_;
  std::map<std::string, ffi::Function> kernels_;  // by name: the library's kernels main calls
  std::vector<Call> calls_;
  ffi::Any result_;
  bool recorded_ = false;
};

}  // namespace direct
}  // namespace tvmgen
