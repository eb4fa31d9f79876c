// The state a streaming model carries from one run to the next (keyword spotters, voice activity detectors,
// RNN decoders), held by the runtime: main reads each state tensor as an input and returns its next value as
// an output; Model (runtime.cc) keeps the value on the device, feeds it to the state input at every run and
// afterwards takes the state output as the value held. Header-only: runtime.cc is its one user, and the iOS
// app compiles runtime.cc alone.
//
// Taking the next value costs no copy where it can be avoided: the result tensor itself becomes the held
// one (the VM allocates fresh results every run, and nothing writes into a function's inputs). Two cases copy
// on the device instead (CopyFromTo, never through the host):
//  - a state output that is one of the user's input tensors (p_new = x: the VM returns the input itself),
//    which the next SetInput would overwrite before the run reads it;
//  - Vulkan with recorded runs (copy_results): a replay reads the buffers it recorded, so the held tensors
//    stay the same buffers and each run's new values are copied into them (unless a result is itself a held
//    tensor, y = s: that model takes its results as other devices do, and its runs are not recorded).
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "manifest.h"
#include "npy.h"

namespace tvmgen {
namespace state {

namespace ffi = tvm::ffi;

inline std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Whether two tensors share memory: overlapping bytes where the data pointer is an address (the CPU), the
// same buffer elsewhere (an OpenCL or Vulkan buffer handle, shared by every view of it).
inline bool SharesMemory(const ffi::Tensor& a, const ffi::Tensor& b) {
  if (a.data_ptr() == b.data_ptr()) return true;
  if (a.device().device_type != kDLCPU || b.device().device_type != kDLCPU) return false;
  const char* pa = static_cast<const char*>(a.data_ptr()) + a.byte_offset();
  const char* pb = static_cast<const char*>(b.data_ptr()) + b.byte_offset();
  return pa < pb + ffi::GetDataSize(b) && pb < pa + ffi::GetDataSize(a);
}

class HeldState {
 public:
  using ReadFile = std::function<std::string(const std::string& path)>;

  /*!
   * \brief Split main's inputs and outputs into the user's own and the state pairs the manifest lists, and
   * read each pair's initial value (`read(path)`: a file of the artifact). `where` names the artifact.
   */
  void Init(const std::vector<manifest::StateEntry>& entries, const std::vector<TensorInfo>& main_inputs,
            const std::vector<TensorInfo>& main_outputs, const ReadFile& read, const std::string& where) {
    std::vector<int> in_state(main_inputs.size(), -1), out_state(main_outputs.size(), -1);
    auto find = [&](const std::vector<TensorInfo>& list, const std::string& name, const std::string& field,
                    const char* what) {
      std::string names;
      for (size_t k = 0; k < list.size(); ++k) {
        if (list[k].name == name) return static_cast<int>(k);
        names += (k ? ", " : "") + list[k].name;
      }
      throw Error("manifest.json in " + where + ": " + field + " \"" + name + "\" is not one of the model's " +
                  what + " (" + names + "): compile the model again with --state naming its own tensors");
    };
    for (const manifest::StateEntry& e : entries) {
      const std::string field = "state[" + std::to_string(pairs_.size()) + "]";
      Pair p;
      p.in_pos = find(main_inputs, e.input, field + ".input", "inputs");
      p.out_pos = find(main_outputs, e.output, field + ".output", "outputs");
      if (in_state[p.in_pos] >= 0 || out_state[p.out_pos] >= 0) {
        throw Error("manifest.json in " + where + ": " + field + " (" + e.input + " -> " + e.output +
                    ") reuses a tensor of an earlier state pair: each input and output carries one state");
      }
      in_state[p.in_pos] = out_state[p.out_pos] = static_cast<int>(pairs_.size());
      p.info = main_inputs[p.in_pos];
      p.output = e.output;
      for (const TensorInfo* t : {&main_inputs[p.in_pos], &main_outputs[p.out_pos]}) {
        if (t->shape != e.shape || t->dtype != e.dtype) {
          throw Error("manifest.json in " + where + ": " + field + " says " + e.dtype + " " + ShapeText(e.shape) +
                      ", the model's \"" + t->name + "\" is " + t->dtype + " " + ShapeText(t->shape) +
                      ": a state input and its output have one shape and dtype");
        }
      }
      if (!e.initial.empty()) {
        std::string bytes = read(e.initial);
        npy::Array a = npy::Parse(bytes.data(), bytes.size(), e.initial + " of " + where);
        if (a.dtype != e.dtype || a.shape != e.shape) {
          throw Error("the initial value of state \"" + e.input + "\" (" + e.initial + " of " + where + ") is " +
                      a.dtype + " " + ShapeText(a.shape) + ", the state is " + e.dtype + " " + ShapeText(e.shape) +
                      ": compile the model again");
        }
        p.initial.assign(a.data.begin(), a.data.end());
      }
      infos_.push_back(p.info);
      pairs_.push_back(std::move(p));
    }
    for (size_t k = 0; k < main_inputs.size(); ++k) {
      slots_.push_back(in_state[k] >= 0 ? -1 - in_state[k] : static_cast<int>(user_inputs.size()));
      if (in_state[k] < 0) user_inputs.push_back(main_inputs[k]);
    }
    for (size_t k = 0; k < main_outputs.size(); ++k) {
      if (out_state[k] >= 0) continue;
      user_outputs.push_back(main_outputs[k]);
      output_pos.push_back(static_cast<int>(k));
    }
  }

  /*!
   * \brief Allocate the held tensors on the model's device with their initial values. `copy_results`: keep
   * these tensors for good and copy each run's new values into them (Vulkan's recorded runs).
   */
  void Allocate(std::function<ffi::Tensor(const TensorInfo&)> alloc, ffi::Function copy_from_bytes,
                ffi::Function copy_from_to, bool copy_results) {
    alloc_ = std::move(alloc);
    copy_from_bytes_ = copy_from_bytes;
    copy_from_to_ = copy_from_to;
    copy_results_ = copy_results;
    for (const Pair& p : pairs_) held_.push_back(alloc_(p.info));
    Reset({});
  }

  // The user's inputs and outputs: main's, less the state ones; output_pos[i] is user output i's result index.
  std::vector<TensorInfo> user_inputs, user_outputs;
  std::vector<int> output_pos;

  const std::vector<TensorInfo>& infos() const { return infos_; }

  /*! \brief main's arguments: the user's input tensors and the held state, in main's order. */
  void AppendArgs(const std::vector<ffi::Tensor>& inputs, std::vector<ffi::AnyView>* args) const {
    for (int s : slots_) {
      if (s >= 0) {
        args->emplace_back(inputs[s]);
      } else {
        args->emplace_back(held_[-1 - s]);
      }
    }
  }

  /*!
   * \brief After a run: each state output (of main's `results`) becomes the value held. Returns true when it
   * stopped copying into the same buffers (see Allocate): the caller's recorded runs are then stale.
   */
  bool Advance(const std::vector<ffi::Tensor>& results, const std::vector<ffi::Tensor>& inputs) {
    if (pairs_.empty()) return false;
    bool stopped = false;
    if (copy_results_) {
      // Copying into a held tensor that another result is (y = s, or s2_new = s1) would change that result:
      // such a model takes its results as they are, as on other devices, and runs are no longer recorded.
      for (size_t i = 0; i < pairs_.size() && !stopped; ++i) stopped = !Exclusive(i, results);
      copy_results_ = !stopped;
    }
    for (size_t i = 0; i < pairs_.size(); ++i) {
      const ffi::Tensor& r = results[pairs_[i].out_pos];
      if (copy_results_) {
        if (!SharesMemory(r, held_[i])) Copy(r, held_[i]);  // s_new = s: already there
        continue;
      }
      bool in_input = false;
      for (const ffi::Tensor& t : inputs) in_input = in_input || SharesMemory(r, t);
      // a user's input tensor is rewritten by the next SetInput: its value is copied, into the tensor held
      // now when nothing else reads it, else into a new one
      held_[i] = !in_input ? r : Copy(r, Exclusive(i, results) ? held_[i] : alloc_(pairs_[i].info));
    }
    return stopped;
  }

  /*! \brief The tensors held now (Vulkan: buffers another model's recorded run must not write). */
  const std::vector<ffi::Tensor>& held() const { return held_; }

  /*!
   * \brief Every state back to its initial value. `results`: the latest run's (what the user may still read).
   * Returns whether a held tensor was replaced by a new one (a recorded run that reads it is then stale).
   */
  bool Reset(const std::vector<ffi::Tensor>& results) {
    bool replaced = false;
    std::vector<char> zeros;
    for (size_t i = 0; i < pairs_.size(); ++i) {
      const char* initial = pairs_[i].initial.data();
      if (pairs_[i].initial.empty()) {
        zeros.assign(pairs_[i].info.nbytes, 0);
        initial = zeros.data();
      }
      replaced = Write(i, initial, results) || replaced;
    }
    return replaced;
  }

  /*! \brief The index of the state whose input is `name`; Error listing the states otherwise. */
  int Index(const std::string& name) const {
    for (size_t i = 0; i < pairs_.size(); ++i) {
      if (pairs_[i].info.name == name) return static_cast<int>(i);
    }
    if (pairs_.empty()) throw Error("unknown state \"" + name + "\": this model carries no state between runs");
    std::string names;
    for (const Pair& p : pairs_) names += (names.empty() ? "" : ", ") + p.info.name + " (next from " + p.output + ")";
    throw Error("unknown state \"" + name + "\"; this model's states are (named after their inputs): " + names);
  }

  /*! \brief Whether `name` is a state input (the runtime feeds it; SetInput refuses it). */
  bool IsStateInput(const std::string& name) const {
    for (const Pair& p : pairs_) {
      if (p.info.name == name) return true;
    }
    return false;
  }

  const TensorInfo& Info(int index) const {
    if (index < 0 || index >= static_cast<int>(pairs_.size())) {
      throw Error("state index " + std::to_string(index) + " is out of range: the model has " +
                  std::to_string(pairs_.size()) + " state tensors");
    }
    return pairs_[index].info;
  }

  void Get(int index, void* data, size_t nbytes, ffi::Function copy_to_bytes) const {
    CheckSize(Info(index), data, nbytes, false);
    try {
      copy_to_bytes(held_[index], data, static_cast<int64_t>(nbytes));
    } catch (const ffi::Error& e) {
      throw Error("copying state \"" + pairs_[index].info.name + "\" from the device failed: " + e.what());
    }
  }

  /*! \brief Copy host bytes into a state; returns whether its held tensor was replaced (see Reset). */
  bool Set(int index, const void* data, size_t nbytes, const std::vector<ffi::Tensor>& results) {
    CheckSize(Info(index), data, nbytes, true);
    return Write(index, data, results);
  }

 private:
  struct Pair {
    TensorInfo info;     // the state input's name, shape and dtype
    std::string output;  // the output its next value comes from
    int in_pos = 0, out_pos = 0;
    std::vector<char> initial;  // the .npy's data; empty for zeros
  };

  // `set`: bytes given to SetState ("takes N bytes, M were given"), else GetState's buffer.
  static void CheckSize(const TensorInfo& t, const void* data, size_t nbytes, bool set) {
    if (nbytes != t.nbytes) {
      const std::string n = std::to_string(nbytes);
      throw Error("state \"" + t.name + "\" (" + t.dtype + " " + ShapeText(t.shape) + ") " +
                  (set ? "takes " : "holds ") + std::to_string(t.nbytes) + " bytes, " +
                  (set ? n + " were given" : "the buffer has " + n));
    }
    if (data == nullptr) throw Error("state \"" + t.name + "\": no data (null pointer)");
  }

  // Whether held tensor i is read by nothing else: no other state, no result of the latest run but its own.
  bool Exclusive(size_t i, const std::vector<ffi::Tensor>& results) const {
    for (size_t j = 0; j < held_.size(); ++j) {
      if (j != i && SharesMemory(held_[i], held_[j])) return false;
    }
    for (size_t k = 0; k < results.size(); ++k) {
      if (static_cast<int>(k) != pairs_[i].out_pos && SharesMemory(held_[i], results[k])) return false;
    }
    return true;
  }

  bool Write(size_t i, const void* data, const std::vector<ffi::Tensor>& results) {
    const bool replace = !Exclusive(i, results);
    if (replace) held_[i] = alloc_(pairs_[i].info);
    try {
      copy_from_bytes_(held_[i], const_cast<void*>(data), static_cast<int64_t>(pairs_[i].info.nbytes));
    } catch (const ffi::Error& e) {
      throw Error("copying state \"" + pairs_[i].info.name + "\" to the device failed: " + e.what());
    }
    return replace;
  }

  ffi::Tensor Copy(const ffi::Tensor& from, ffi::Tensor to) {
    try {
      copy_from_to_(from, to);
    } catch (const ffi::Error& e) {
      throw Error("keeping the model's state on the device failed: " + std::string(e.what()));
    }
    return to;
  }

  std::vector<Pair> pairs_;
  std::vector<TensorInfo> infos_;
  std::vector<int> slots_;  // main's inputs: >= 0 the user's input of that index, < 0 state -1 - slot
  std::vector<ffi::Tensor> held_;
  std::function<ffi::Tensor(const TensorInfo&)> alloc_;
  ffi::Function copy_from_bytes_, copy_from_to_;
  bool copy_results_ = false;
};

}  // namespace state
}  // namespace tvmgen
