// tvmgen-run: load an artifact, feed inputs (.npy or raw bytes), run, write outputs and timings.
// The device-side twin of `tvmgen run`, usable over `adb shell` and under qemu.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../src/common/json.h"
#include "../src/npy.h"
#include "tvmgen/runtime.h"

namespace {

const char* kUsage =
    "usage: tvmgen-run ARTIFACT_DIR [options]\n"
    "  -i, --input [NAME=]FILE   input as .npy, or raw bytes (any other extension); repeatable.\n"
    "                            NAME= may be left out when inputs are given in the model's order.\n"
    "                            Inputs not given get deterministic pseudo-random values.\n"
    "  -o, --output-dir DIR      write each output as NAME.npy in DIR (with --sequence: DIR/<step>/NAME.npy)\n"
    "  --sequence DIR            a streaming model's steps, in order: DIR/000000/, DIR/000001/, ... each\n"
    "                            with one NAME.npy per input (the state inputs excepted: the runtime\n"
    "                            carries the state). Each pass runs every step from the initial state;\n"
    "                            --warmup/--repeat count passes (default 0 and 1), the timings have each\n"
    "                            step's medians\n"
    "  --warmup N                untimed runs before the timed ones (default 1)\n"
    "  --repeat N                timed runs (default 10)\n"
    "  --pace-ms MS              sleep MS milliseconds before each timed run, as an app does between\n"
    "                            camera frames (33.3 for 30 fps; default 0: back to back)\n"
    "  --threads N               CPU threads (default: $TVM_NUM_THREADS, else one per big core)\n"
    "  --affinity big|little|any pin TVM's thread pool to these cores (default any: tvmgen's own\n"
    "                            launcher, unpinned; see ThreadOptions in tvmgen/runtime.h)\n"
    "  --host-visible-inputs     OpenCL: inputs in host-visible (mapped) buffers, copied with memcpy\n"
    "  --from-memory             read the artifact's files into memory first and load it from there\n"
    "                            (tvmgen::ArtifactData: the library through an in-memory file, the\n"
    "                            weights from bytes), as an app with downloaded or decrypted models does\n"
    "  --vm                      run main on the Relax VM on every run, not as the direct kernel calls\n"
    "                            recorded on the first run (the timings' \"executor\" says which ran)\n"
    "  --prepare                 build the GPU kernels (or load them from the kernel cache) after loading,\n"
    "                            before the first run (Model::Prepare): the first run compiles nothing\n"
    "  --timings FILE            write the timings JSON to FILE (default: stdout)\n"
    "  --profile FILE            also time each kernel over --repeat runs; the profile JSON to FILE\n"
    "  -h, --help                this text\n";

struct Stats {
  std::vector<double> v;
  std::string Json() const {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    double sum = 0;
    for (double x : s) sum += x;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "{\"median\": %.6f, \"mean\": %.6f, \"min\": %.6f, \"max\": %.6f}",
                  Median(), s.empty() ? 0 : sum / s.size(), s.empty() ? 0 : s.front(),
                  s.empty() ? 0 : s.back());
    return buf;
  }
  double Median() const { return tvmgen::Median(v); }
};

// Host bytes starting at a 64-byte boundary, as the kernels' buffers do: an output they can write in place.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t n) : n_(n) {
    void* p = nullptr;
    if (posix_memalign(&p, 64, n == 0 ? 64 : n) != 0) throw std::bad_alloc();
    p_.reset(static_cast<char*>(p));
  }
  char* data() const { return p_.get(); }
  size_t size() const { return n_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> p_;
  size_t n_;
};

int Usage(const std::string& msg) {
  std::fprintf(stderr, "tvmgen-run: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

std::string SafeName(const std::string& name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out;
}

std::vector<char> PseudoRandom(const tvmgen::TensorInfo& t, uint32_t seed) {
  std::vector<char> bytes(t.nbytes, 0);
  if (t.dtype != "float32") return bytes;  // zeros for other dtypes
  float* f = reinterpret_cast<float*>(bytes.data());
  for (size_t i = 0; i < t.nbytes / 4; ++i) {
    seed = seed * 1664525u + 1013904223u;
    f[i] = static_cast<float>(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  return bytes;
}

std::vector<char> ReadInput(const std::string& path, const tvmgen::TensorInfo& t) {
  bool is_npy = path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
  if (is_npy) {
    tvmgen::npy::Array a = tvmgen::npy::Load(path);
    if (a.dtype != t.dtype) {
      throw tvmgen::Error("input \"" + t.name + "\": " + path + " holds " + a.dtype + ", the model expects " + t.dtype);
    }
    if (a.shape != t.shape) {
      auto fmt = [](const std::vector<int64_t>& s) {
        std::string r;
        for (int64_t d : s) r += (r.empty() ? "" : "x") + std::to_string(d);
        return r.empty() ? std::string("scalar (0-d)") : r;
      };
      throw tvmgen::Error("input \"" + t.name + "\": " + path + " has shape " + fmt(a.shape) +
                          ", the model expects " + fmt(t.shape));
    }
    return a.data;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw tvmgen::Error("cannot open input file " + path + ": " + std::strerror(errno));
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// A sequence directory's steps (DIR/000000/, DIR/000001/, ... one NAME.npy per input of the model's own): each
// step's inputs' bytes, all read and checked before any run. A gap in the numbering, a missing file, or a file
// that is no input (a state input's among them) is an error naming the step and the input.
std::vector<std::vector<std::vector<char>>> ReadSequence(const std::string& dir, const tvmgen::Model& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw tvmgen::Error("the sequence directory " + dir + " does not exist (or is not a directory)");
  }
  std::vector<long> numbers;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (e.is_directory() && name.size() == 6 && name.find_first_not_of("0123456789") == std::string::npos) {
      numbers.push_back(std::stol(name));
    }
  }
  if (numbers.empty()) {
    throw tvmgen::Error("the sequence " + dir + " holds no steps: put each step's inputs in DIR/000000/, DIR/000001/, "
                        "... as NAME.npy, one per input");
  }
  std::sort(numbers.begin(), numbers.end());
  auto step_name = [](long k) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%06ld", k);
    return std::string(buf);
  };
  for (size_t k = 0; k < numbers.size(); ++k) {
    if (numbers[k] != static_cast<long>(k)) {
      throw tvmgen::Error("the sequence " + dir + " has no step " + step_name(static_cast<long>(k)) + " (it has " +
                          std::to_string(numbers.size()) + " steps up to " + step_name(numbers.back()) +
                          "): steps are numbered from 000000 without gaps");
    }
  }
  const auto& inputs = model.inputs();
  std::map<std::string, std::string> files;  // NAME.npy -> the input's name ("" for a state input)
  for (const tvmgen::TensorInfo& t : inputs) files[SafeName(t.name) + ".npy"] = t.name;
  for (const tvmgen::TensorInfo& t : model.states()) files.emplace(SafeName(t.name) + ".npy", "");
  for (long k : numbers) {  // every file there before any is read
    const std::string folder = dir + "/" + step_name(k);
    for (const tvmgen::TensorInfo& t : inputs) {
      if (!fs::is_regular_file(folder + "/" + SafeName(t.name) + ".npy", ec)) {
        throw tvmgen::Error("the sequence " + dir + ": step " + step_name(k) + " has no input \"" + t.name + "\" (" +
                            folder + "/" + SafeName(t.name) + ".npy)");
      }
    }
    for (const fs::directory_entry& e : fs::directory_iterator(folder)) {
      std::string name = e.path().filename().string();
      if (name.size() < 4 || name.compare(name.size() - 4, 4, ".npy") != 0) continue;
      auto it = files.find(name);
      if (it == files.end()) {
        throw tvmgen::Error("the sequence " + dir + ": step " + step_name(k) + " holds " + name + ", which is not an "
                            "input of the model: each step holds one NAME.npy per input");
      }
      if (it->second.empty()) {
        throw tvmgen::Error("the sequence " + dir + ": step " + step_name(k) + " holds " + name + ", a state input: "
                            "the runtime holds the state and feeds it itself, from its initial value at step "
                            "000000; leave " + name + " out of the steps");
      }
    }
  }
  std::vector<std::vector<std::vector<char>>> steps;
  for (long k : numbers) {
    steps.emplace_back();
    for (const tvmgen::TensorInfo& t : inputs) {
      steps.back().push_back(ReadInput(dir + "/" + step_name(k) + "/" + SafeName(t.name) + ".npy", t));
    }
  }
  return steps;
}

// The artifact in `dir` read into memory and loaded from there (the bytes are freed once Load returns).
std::unique_ptr<tvmgen::Model> LoadFromMemory(const std::string& dir, const tvmgen::LoadOptions& options) {
  auto read = [&](const std::string& name) {
    std::ifstream f(dir + "/" + name, std::ios::binary);
    if (!f) throw tvmgen::Error("cannot open " + dir + "/" + name + ": " + std::strerror(errno));
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  tvmgen::ArtifactData data;
  data.name = dir + " (read into memory)";
  data.manifest_json = read("manifest.json");
  tvmgen::ArtifactFiles files = tvmgen::ReadArtifactFiles(data.manifest_json);
  std::string library = read(files.library), params = files.params.empty() ? "" : read(files.params);
  for (const std::string& f : files.state) data.state_files[f] = read(f);
  data.library_bytes = library.data();
  data.library_size = library.size();
  if (!files.params.empty()) {
    data.params_bytes = params.data();
    data.params_size = params.size();
  }
  return tvmgen::Model::Load(data, options);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, output_dir, timings_file, profile_file, sequence_dir;
  std::vector<std::string> input_flags;
  int warmup = -1, repeat = -1;  // -1: the default, which --sequence changes
  double pace_ms = 0;
  bool host_visible_inputs = false, from_memory = false, prepare = false, vm_only = false;
  tvmgen::ThreadOptions threads;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
      } else if (a == "-i" || a == "--input") {
        input_flags.push_back(value("--input"));
      } else if (a == "--sequence") {
        sequence_dir = value("--sequence");
      } else if (a == "-o" || a == "--output-dir") {
        output_dir = value("--output-dir");
      } else if (a == "--warmup") {
        warmup = std::stoi(value("--warmup"));
      } else if (a == "--repeat") {
        repeat = std::stoi(value("--repeat"));
      } else if (a == "--pace-ms") {
        pace_ms = std::stod(value("--pace-ms"));
      } else if (a == "--threads") {
        threads.threads = std::stoi(value("--threads"));
      } else if (a == "--affinity") {
        std::string v = value("--affinity");
        if (v == "big") threads.affinity = 1;
        else if (v == "little") threads.affinity = -1;
        else if (v == "any") threads.affinity = 0;
        else return Usage("--affinity takes big, little or any, not " + v);
      } else if (a == "--host-visible-inputs") {
        host_visible_inputs = true;
      } else if (a == "--from-memory") {
        from_memory = true;
      } else if (a == "--prepare") {
        prepare = true;
      } else if (a == "--vm") {
        vm_only = true;
      } else if (a == "--timings") {
        timings_file = value("--timings");
      } else if (a == "--profile") {
        profile_file = value("--profile");
      } else if (!a.empty() && a[0] == '-') {
        return Usage("unknown option " + a);
      } else if (dir.empty()) {
        dir = a;
      } else {
        return Usage("more than one artifact directory given (" + dir + ", " + a + ")");
      }
    } catch (const std::invalid_argument& e) {
      return Usage(std::string(e.what()).find("sto") == 0 ? a + " takes a number" : e.what());
    } catch (const std::out_of_range&) {
      return Usage(a + ": number out of range");
    }
  }
  if (dir.empty()) return Usage("no artifact directory given");
  const bool sequence = !sequence_dir.empty();
  if (sequence && !input_flags.empty()) {
    return Usage("--sequence feeds every input from its step folders: leave out --input");
  }
  if (warmup == -1) warmup = sequence ? 0 : 1;
  if (repeat == -1) repeat = sequence ? 1 : 10;
  if (repeat < 1 || warmup < 0) return Usage("--repeat must be >= 1 and --warmup >= 0");
  if (!(pace_ms >= 0 && pace_ms <= 60000)) return Usage("--pace-ms must be between 0 and 60000");

  try {
    tvmgen::LoadOptions load_options;
    load_options.threads = threads;
    load_options.host_visible_inputs = host_visible_inputs;
    load_options.direct_calls = !vm_only;
    tvmgen::ResidentMemory before_load = tvmgen::ReadResidentMemory();
    auto model = from_memory ? LoadFromMemory(dir, load_options) : tvmgen::Model::Load(dir, load_options);
    tvmgen::ResidentMemory after_load = tvmgen::ReadResidentMemory();
    if (host_visible_inputs && !model->host_visible_inputs()) {
      std::fprintf(stderr, "tvmgen-run: --host-visible-inputs ignored: the model runs on %s, not opencl\n",
                   model->device().c_str());
    }
    std::string prepared = "null";
    if (prepare) {
      tvmgen::PrepareStats ps = model->Prepare();
      prepared = ps.ToJson();
      std::fprintf(stderr, "tvmgen-run: prepared %d kernels in %d programs (%d built, %d from the kernel cache) in %.1f ms\n",
                   ps.kernels, ps.programs, ps.built, ps.cached, ps.ms);
    }
    const auto& inputs = model->inputs();
    // the steps' inputs: a sequence's, else one step of the inputs given (pseudo-random where not given)
    std::vector<std::vector<std::vector<char>>> steps;
    if (sequence) steps = ReadSequence(sequence_dir, *model);
    std::vector<std::vector<char>> data(inputs.size());
    std::vector<bool> given(inputs.size(), sequence);
    for (size_t k = 0; k < input_flags.size(); ++k) {
      const std::string& flag = input_flags[k];
      size_t eq = flag.find('=');
      int index;
      std::string path;
      if (eq == std::string::npos) {
        if (k >= inputs.size()) throw tvmgen::Error("more --input files than model inputs");
        index = static_cast<int>(k);
        path = flag;
      } else {
        index = model->InputIndex(flag.substr(0, eq));
        path = flag.substr(eq + 1);
      }
      data[index] = ReadInput(path, inputs[index]);
      given[index] = true;
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!given[k]) {
        std::fprintf(stderr, "tvmgen-run: input \"%s\" not given: using pseudo-random values\n", inputs[k].name.c_str());
        data[k] = PseudoRandom(inputs[k], 42 + static_cast<uint32_t>(k));
      }
    }
    if (!sequence) steps.push_back(data);
    if (!sequence && model->StateCount() > 0) {
      std::fprintf(stderr, "tvmgen-run: the model carries state (%d tensors) from run to run: the %d runs are %d "
                   "steps from its initial state, the outputs written the last one's (--sequence DIR feeds a "
                   "sequence)\n", model->StateCount(), warmup + repeat, warmup + repeat);
    }
    const auto& outputs = model->outputs();
    // each step's outputs (one step's without --sequence), bound to the runs of one step: the kernels write them
    // where they can (Model::BindOutput), as an app that keeps its output buffers does
    std::vector<std::vector<AlignedBytes>> out(steps.size());
    for (auto& step_out : out) {
      for (size_t k = 0; k < outputs.size(); ++k) step_out.emplace_back(outputs[k].nbytes);
    }
    // without --sequence the inputs are the same every run: bound once (Model::BindInput), read in place where
    // the kernels can, as an app that writes each frame into the buffer it bound does
    std::vector<AlignedBytes> bound_in;
    if (!sequence) {
      for (size_t k = 0; k < outputs.size(); ++k) {
        model->BindOutput(static_cast<int>(k), out[0][k].data(), out[0][k].size());
      }
      for (size_t k = 0; k < inputs.size(); ++k) {
        bound_in.emplace_back(data[k].size());
        std::memcpy(bound_in[k].data(), data[k].data(), data[k].size());
        model->BindInput(static_cast<int>(k), bound_in[k].data(), bound_in[k].size());
      }
    }

    // a run: one step of a sequence's pass, or one run of the inputs given
    Stats copy_in, run, copy_out, total;
    std::vector<Stats> step_total(steps.size()), step_run(steps.size());
    const int passes = sequence ? warmup + repeat : 1, runs = sequence ? 1 : warmup + repeat;
    for (int p = 0; p < passes; ++p) {
      if (sequence) model->ResetState();
      for (size_t s = 0; s < steps.size(); ++s) {
        for (int r = 0; r < runs; ++r) {
          const bool timed = sequence ? p >= warmup : r >= warmup;
          if (timed && pace_ms > 0) {  // the idle gap between frames: the cores may sleep, caches cool
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(pace_ms));
          }
          const auto& in = steps[s];
          if (sequence) {
            for (size_t k = 0; k < inputs.size(); ++k) model->SetInput(static_cast<int>(k), in[k].data(), in[k].size());
          }
          model->Run();
          for (size_t k = 0; k < outputs.size(); ++k) {
            model->GetOutput(static_cast<int>(k), out[s][k].data(), out[s][k].size());
          }
          if (timed) {
            copy_in.v.push_back(model->timings().copy_in_ms);
            run.v.push_back(model->timings().run_ms);
            copy_out.v.push_back(model->timings().copy_out_ms);
            total.v.push_back(copy_in.v.back() + run.v.back() + copy_out.v.back());
            step_total[s].v.push_back(total.v.back());
            step_run[s].v.push_back(run.v.back());
          }
        }
      }
    }
    if (!output_dir.empty()) {
      for (size_t s = 0; s < steps.size(); ++s) {
        char step[16];
        std::snprintf(step, sizeof(step), "%06zu", s);
        std::string folder = sequence ? output_dir + "/" + step : output_dir;
        std::error_code ec;  // -o DIR may name a directory that does not exist yet
        std::filesystem::create_directories(folder, ec);
        if (ec) throw tvmgen::Error("cannot create the output directory " + folder + ": " + ec.message());
        for (size_t k = 0; k < outputs.size(); ++k) {
          tvmgen::npy::Save(folder + "/" + SafeName(outputs[k].name) + ".npy", outputs[k].dtype, outputs[k].shape,
                            out[s][k].data(), out[s][k].size());
        }
      }
    }
    if (!profile_file.empty()) {
      std::string profile = model->Profile(repeat);
      std::ofstream f(profile_file);
      f << "{\"device\": \"" << model->device() << "\", \"arch\": \"" << tvmgen::RuntimeArch()
        << "\", \"profile\": " << profile << "}\n";
      if (!f) throw tvmgen::Error("cannot write " + profile_file);
    }
    tvmgen::ResidentMemory end = tvmgen::ReadResidentMemory();
    const tvmgen::Timings& t = model->timings();
    std::ostringstream js;
    js << "{\"device\": \"" << model->device() << "\", \"arch\": \"" << tvmgen::RuntimeArch() << "\", "
       << "\"host_visible_inputs\": " << (model->host_visible_inputs() ? "true" : "false") << ", "
       << "\"threads\": " << model->threads() << ", \"thread_pool\": \"" << model->thread_pool() << "\", "
       << "\"executor\": " << tvmgen::JsonString(model->executor()) << ", \"outputs_in_place\": [";
    for (size_t k = 0; k < outputs.size(); ++k) js << (k ? ", " : "") << (model->OutputWrittenInPlace(k) ? "true" : "false");
    js << "], \"inputs_in_place\": [";
    for (size_t k = 0; k < inputs.size(); ++k) js << (k ? ", " : "") << (model->InputReadInPlace(k) ? "true" : "false");
    js << "], "
       << "\"load_ms\": " << t.load_ms << ", \"init_ms\": " << t.init_ms << ", \"prepare\": " << prepared
       << ", \"first_run_ms\": " << t.first_run_ms
       << ", \"warmup\": " << warmup << ", \"runs\": " << total.v.size() << ", \"pace_ms\": " << pace_ms
       << ", \"state\": " << model->StateCount() << ", \"copy_in_ms\": " << copy_in.Json()
       << ", \"run_ms\": " << run.Json() << ", \"copy_out_ms\": " << copy_out.Json()
       << ", \"total_ms\": " << total.Json() << ", \"sequence\": ";
    if (sequence) {
      // each step's time (copy-in + run + copy-out; and the run alone), its median over the timed passes: what a
      // streaming app's call costs; then the median, 90th percentile (linear, as numpy's) and max over the steps
      std::vector<double> step_ms;
      for (const Stats& st : step_total) step_ms.push_back(st.Median());
      std::vector<double> sorted = step_ms;
      std::sort(sorted.begin(), sorted.end());
      const double at = 0.9 * static_cast<double>(sorted.size() - 1);
      const size_t lo = static_cast<size_t>(at), hi = std::min(lo + 1, sorted.size() - 1);
      const double p90 = sorted[lo] + (sorted[hi] - sorted[lo]) * (at - static_cast<double>(lo));
      js << "{\"dir\": " << tvmgen::JsonString(sequence_dir) << ", \"steps\": " << steps.size()
         << ", \"passes\": " << repeat << ", \"step_ms\": [";
      for (size_t s = 0; s < steps.size(); ++s) js << (s ? ", " : "") << step_ms[s];
      js << "], \"step_run_ms\": [";
      for (size_t s = 0; s < steps.size(); ++s) js << (s ? ", " : "") << step_run[s].Median();
      js << "], \"median_ms\": " << tvmgen::Median(step_ms) << ", \"p90_ms\": " << p90
         << ", \"max_ms\": " << sorted.back() << "}";
    } else {
      js << "null";
    }
    js << ", \"memory\": {\"source\": \"/proc/self/status\", "
       << "\"before_load_bytes\": " << before_load.rss_bytes << ", \"after_load_peak_bytes\": " << after_load.peak_bytes
       << ", \"overall_peak_bytes\": " << end.peak_bytes << "}}\n";
    char pace_note[96] = "";
    if (sequence) {
      std::snprintf(pace_note, sizeof(pace_note), " (%zu steps x %d pass%s)", steps.size(), repeat,
                    repeat == 1 ? "" : "es");
    }
    if (pace_ms > 0) {
      std::snprintf(pace_note + std::strlen(pace_note), sizeof(pace_note) - std::strlen(pace_note), ", %g ms apart",
                    pace_ms);
    }
    std::fprintf(stderr,
                 "tvmgen-run: %s on %s (%s, threads: %d): load %.1f ms, init %.1f ms, first run %.1f ms; median of %d%s: "
                 "copy-in %.3f ms, run %.3f ms, copy-out %.3f ms\n",
                 (from_memory ? dir + " (read into memory)" : dir).c_str(), model->device().c_str(), tvmgen::RuntimeArch(), model->threads(), t.load_ms, t.init_ms, t.first_run_ms,
                 static_cast<int>(total.v.size()), pace_note, copy_in.Median(), run.Median(), copy_out.Median());
    // the VM where direct calls were possible costs microseconds a run: say why (LoadOptions::direct_calls)
    if (model->executor() != "direct calls" && model->device() == "cpu") {
      std::fprintf(stderr, "tvmgen-run: main ran on the %s\n", model->executor().c_str());
    }
    if (end.peak_bytes > 0) {
      std::fprintf(stderr, "tvmgen-run: peak resident memory (VmHWM): after load %.1f MB, overall %.1f MB\n",
                   after_load.peak_bytes / 1048576.0, end.peak_bytes / 1048576.0);
    }
    if (timings_file.empty()) {
      std::fputs(js.str().c_str(), stdout);
    } else {
      std::ofstream f(timings_file);
      f << js.str();
      if (!f) throw tvmgen::Error("cannot write " + timings_file);
    }
  } catch (const tvmgen::Error& e) {
    std::fprintf(stderr, "tvmgen-run: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tvmgen-run: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
