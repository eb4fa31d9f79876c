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

#include <algorithm>
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

// The builtins of RunsOnce that only read their arguments' shapes (no view, no tuple kept).
inline bool OnlyLooks(const std::string& name) {
  return name == "vm.builtin.check_tensor_info" || name == "vm.builtin.match_shape";
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

// An allocator for ffi::Tensor::FromNDAlloc that allocates nothing: the tensor is on memory its owner keeps (a
// caller's bound buffer, or a view of one) and frees.
struct OnMemory {
  void AllocData(DLTensor* t, void* data) { t->data = data; }
  void FreeData(DLTensor*) {}
};

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
    for (auto& slots : slots_) slots.clear();
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
    std::set<const void*> allocated;  // the tensors this run allocated (alloc_tensor): no weight, input or constant
    std::set<const void*> viewed;     // tensors given to a builtin that may make a view of them or of their storage
    std::map<const void*, std::vector<ffi::Any>> reshaped;  // a tensor -> the reshape views made of it
    ffi::Function keep = ffi::Function::FromPacked([&](ffi::PackedArgs a, ffi::Any* rv) {
      *rv = static_cast<int64_t>(0);
      std::string name(a[1].cast<ffi::String>());
      if (!a[2].cast<bool>()) {
        if (name == "vm.builtin.alloc_tensor") allocated.insert(Identity(a[3]));
        if (name == "vm.builtin.reshape" && a.size() > 4) reshaped[Identity(a[4])].emplace_back(a[3]);
        return;
      }
      if (RunsOnce(name)) {
        // (a tuple of the outputs is main's result, not a view of them; a reshape's views are kept in `reshaped`)
        if (!OnlyLooks(name) && name != "vm.builtin.make_tuple" && name != "vm.builtin.reshape") {
          for (int i = 4; i < a.size(); ++i) viewed.insert(Identity(a[i]));
        }
        return;
      }
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
    // Each output that this run allocated and no builtin viewed, and each argument of main (an input) that no
    // builtin viewed and main does not return: the places in the calls where it is an argument, where another
    // buffer can take its place (Bind). A weight, an input or a constant main returns keeps its tensor as an
    // output; so does a tensor returned as two outputs.
    std::vector<const void*> outs;
    if (auto tensor = result.try_cast<ffi::Tensor>()) {
      outs.push_back(Identity(result));
    } else if (auto tuple = result.try_cast<ffi::Array<ffi::Any>>()) {
      for (const ffi::Any& item : *tuple) outs.push_back(Identity(item));
    }
    slots_[kOutput].assign(outs.size(), Slot());
    for (size_t k = 0; k < outs.size(); ++k) {
      const void* id = outs[k];
      if (id != nullptr && allocated.count(id) && !viewed.count(id) && !reshaped.count(id) &&
          std::count(outs.begin(), outs.end(), id) == 1) {
        Find(id, &slots_[kOutput][k]);
      }
    }
    // An argument's reshape views (a flattened or unsqueezed input, and views of those) move with it: each is
    // given a view of the same shape on the bound bytes. One that main returns, or that another builtin views,
    // keeps the argument's tensor.
    slots_[kArgument].assign(static_cast<size_t>(num_args), Slot());
    for (int k = 0; k < num_args; ++k) {
      const void* id = Identity(args[k]);
      if (id == nullptr || viewed.count(id) || std::find(outs.begin(), outs.end(), id) != outs.end()) continue;
      std::vector<ffi::Any> views;
      bool movable = true;
      for (std::vector<const void*> todo{id}; !todo.empty() && movable;) {
        const void* t = todo.back();
        todo.pop_back();
        auto it = reshaped.find(t);
        if (it == reshaped.end()) continue;
        for (const ffi::Any& v : it->second) {
          const void* vid = Identity(v);
          auto view = v.try_cast<ffi::Tensor>();
          movable = movable && view.has_value() && view->byte_offset() == 0 && !viewed.count(vid) &&
                    std::find(outs.begin(), outs.end(), vid) == outs.end();
          views.push_back(v);
          todo.push_back(vid);
        }
      }
      if (!movable) continue;
      Slot& slot = slots_[kArgument][k];
      Find(id, &slot);
      for (const ffi::Any& v : views) {
        Slot view;
        Find(Identity(v), &view);
        if (view.places.empty()) continue;
        view.recorded = v;
        slot.views.push_back(std::move(view));
      }
      if (slot.places.empty() && !slot.views.empty()) slot.recorded = args[k];
    }
    for (int kind : {kOutput, kArgument}) {
      for (size_t k = 0; k < targets_[kind].size() && k < slots_[kind].size(); ++k) Place(kind, k);
    }
    return result;
  }

  // What Bind replaces: an output of main (the kernels write it) or an argument of main (they read it).
  enum Kind { kOutput = 0, kArgument = 1 };

  /*!
   * \brief From the next replay on, the kernels write output `k` (kOutput, of main's result) into `target`, or
   * read argument `k` (kArgument) from it, instead of the recorded tensor (a tensor of its shape and dtype, on
   * the same device, aligned as the kernels assume); main's result still holds the recorded tensors. An empty
   * `target`: the recorded tensor again. Kept across a new recording.
   */
  void Bind(Kind kind, size_t k, ffi::Optional<ffi::Tensor> target) {
    if (targets_[kind].size() <= k) targets_[kind].resize(k + 1);
    targets_[kind][k] = std::move(target);
    if (recorded_ && k < slots_[kind].size()) Place(kind, k);
  }

  /*! \brief Whether a replay now uses Bind's tensor for output / argument `k` (false before the first recording). */
  bool Uses(Kind kind, size_t k) const {
    return recorded_ && k < slots_[kind].size() && k < targets_[kind].size() && targets_[kind][k].has_value() &&
           (!slots_[kind][k].places.empty() || !slots_[kind][k].views.empty());
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

  // A tensor another can replace: where it is an argument of the calls (call, argument), and the recorded tensor.
  struct Slot {
    std::vector<std::pair<size_t, size_t>> places;
    ffi::Any recorded;
    std::vector<Slot> views;  // an argument's reshape views: each given a view of the bound bytes
  };

  // An object's identity (a tensor's, a shape's...), nullptr for a plain value.
  static const void* Identity(const ffi::AnyView& v) {
    return v.type_index() >= ffi::TypeIndex::kTVMFFIStaticObjectBegin ? v.as<ffi::Object>() : nullptr;
  }
  static const void* Identity(const ffi::Any& v) { return Identity(ffi::AnyView(v)); }

  // The places of the object `id` in the calls, and its tensor.
  void Find(const void* id, Slot* slot) const {
    for (size_t i = 0; i < calls_.size(); ++i) {
      for (size_t j = 0; j < calls_[i].values.size(); ++j) {
        if (Identity(calls_[i].values[j]) == id) slot->places.emplace_back(i, j);
      }
    }
    if (!slot->places.empty()) slot->recorded = calls_[slot->places[0].first].values[slot->places[0].second];
  }

  // Slot k's places given the bound tensor, or the recorded one back; its views' places, views of either.
  void Place(int kind, size_t k) {
    const Slot& slot = slots_[kind][k];
    const ffi::Optional<ffi::Tensor>& target = targets_[kind][k];
    Put(slot, target.has_value() ? ffi::Any(*target) : slot.recorded);
    for (const Slot& view : slot.views) {
      if (!target.has_value()) {
        Put(view, view.recorded);
        continue;
      }
      ffi::Tensor shaped = view.recorded.cast<ffi::Tensor>();
      Put(view, ffi::Tensor::FromNDAlloc(OnMemory(), shaped.shape(), shaped.dtype(), target.value().device(),
                                         target.value().data_ptr()));
    }
  }

  void Put(const Slot& slot, const ffi::Any& value) {
    for (const auto& [i, j] : slot.places) {
      calls_[i].values[j] = value;
      calls_[i].views[j] = calls_[i].values[j];
    }
  }

  std::string entry_;
  std::map<std::string, ffi::Function> kernels_;  // by name: the library's kernels main calls
  std::vector<Call> calls_;
  std::vector<Slot> slots_[2];                          // by Kind, then output / argument: the latest recording's
  std::vector<ffi::Optional<ffi::Tensor>> targets_[2];  // by Kind, then output / argument: Bind's
  ffi::Any result_;
  bool recorded_ = false;
};

}  // namespace direct
}  // namespace tvmgen
