// See app_core.h.
#include "app_core.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "tvmgen/rpc_server.h"
#include "tvmgen/runtime.h"

namespace tvmgen_app {

namespace {

bool KeyOk(const std::string& key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", std::isfinite(v) ? v : 0.0);
  return buf;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace

std::string CheckSettings(const ServerSettings& s) {
  if (s.mode != "standalone" && s.mode != "proxy" && s.mode != "tracker") {
    return "unknown mode \"" + s.mode + "\": choose standalone, proxy or tracker";
  }
  if (s.address.empty()) {
    return s.mode == "standalone" ? "give the address to listen on (0.0.0.0: every network)"
                                  : "give the " + s.mode + "'s address";
  }
  if (s.port <= 0 || s.port > 65535) return "the port must be between 1 and 65535";
  if (!KeyOk(s.key)) return "the key may hold only letters, digits, '-', '_' and '.'";
  if (s.work_dir.empty()) return "no work directory";
  return "";
}

Server::Server(LogFn log) : log_(std::move(log)) {}

Server::~Server() { Stop(); }

bool Server::Start(const ServerSettings& s, const std::vector<std::string>& linked_models, std::string* error) {
  if (running_) {
    *error = "the server is already running";
    return false;
  }
  *error = CheckSettings(s);
  if (!error->empty()) return false;
  if (thread_.joinable()) thread_.join();
  tvmgen::rpc::ServerOptions o;
  o.key = s.key;
  if (s.mode == "proxy") {
    o.proxy_host = s.address;
    o.proxy_port = s.port;
  } else if (s.mode == "tracker") {
    o.tracker_host = s.address;
    o.tracker_port = s.port;
    o.listen_host = "0.0.0.0";  // the tracker hands this device's address to clients on the network
  } else {
    o.standalone = true;
    o.listen_host = s.address;
    o.listen_port = s.port;
  }
  o.work_dir = s.work_dir;
  o.system_lib_only = true;  // iOS cannot load uploaded code: serve the models linked into the app
  o.linked_models = linked_models;
  o.fork_sessions = false;   // an iOS app cannot fork
  o.stop = &stop_;
  stop_ = false;
  running_ = true;
  tvmgen::rpc::SetLogSink(log_);
  thread_ = std::thread([this, o] {
    int rc = tvmgen::rpc::Serve(o);
    if (log_) log_(rc == 0 ? "server stopped" : "server ended with exit code " + std::to_string(rc));
    running_ = false;
  });
  return true;
}

void Server::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  running_ = false;
}

std::string RunLinkedModel(const std::string& model_dir, int warmup, int iterations) {
  std::unique_ptr<tvmgen::Model> model = tvmgen::Model::Load(model_dir);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  for (size_t i = 0; i < model->inputs().size(); ++i) {
    const tvmgen::TensorInfo& t = model->inputs()[i];
    std::vector<unsigned char> bytes(t.nbytes);
    if (t.dtype == "float32") {
      for (size_t k = 0; k < t.nbytes / 4; ++k) {
        float v = uniform(rng);
        std::memcpy(&bytes[k * 4], &v, 4);
      }
    } else {
      for (auto& b : bytes) b = static_cast<unsigned char>(rng() % 4);
    }
    model->SetInput(static_cast<int>(i), bytes.data(), bytes.size());
  }
  std::vector<double> runs, copies_out;
  std::vector<std::vector<unsigned char>> outputs(model->outputs().size());
  for (int r = 0; r < warmup + std::max(1, iterations); ++r) {
    model->Run();
    for (size_t o = 0; o < outputs.size(); ++o) {
      outputs[o].resize(model->outputs()[o].nbytes);
      model->GetOutput(static_cast<int>(o), outputs[o].data(), outputs[o].size());
    }
    if (r >= warmup) {
      runs.push_back(model->timings().run_ms);
      copies_out.push_back(model->timings().copy_out_ms);
    }
  }
  const tvmgen::Timings& tm = model->timings();
  std::string json = "{\"device\": " + Quote(model->device()) + ", \"load_ms\": " + Num(tm.load_ms) +
                     ", \"init_ms\": " + Num(tm.init_ms) + ", \"first_run_ms\": " + Num(tm.first_run_ms) +
                     ", \"copy_in_ms\": " + Num(tm.copy_in_ms) + ", \"median_run_ms\": " + Num(Median(runs)) +
                     ", \"median_copy_out_ms\": " + Num(Median(copies_out)) +
                     ", \"runs\": " + std::to_string(runs.size()) + ", \"outputs\": [";
  for (size_t o = 0; o < outputs.size(); ++o) {
    const tvmgen::TensorInfo& t = model->outputs()[o];
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    json += std::string(o ? ", " : "") + "{\"name\": " + Quote(t.name) + ", \"shape\": [" + shape + "]";
    if (t.dtype == "float32" && !outputs[o].empty()) {
      std::vector<float> v(outputs[o].size() / 4);
      std::memcpy(v.data(), outputs[o].data(), v.size() * 4);
      auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
      json += ", \"min\": " + Num(*lo) + ", \"max\": " + Num(*hi) + ", \"mean\": " + Num(mean);
      if (t.shape.size() == 2 && t.shape[0] == 1) {
        std::vector<size_t> idx(v.size());
        std::iota(idx.begin(), idx.end(), 0);
        size_t k = std::min<size_t>(5, idx.size());
        std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(),
                          [&](size_t a, size_t b) { return v[a] > v[b]; });
        std::string top;
        for (size_t j = 0; j < k; ++j) top += (j ? ", " : "") + std::to_string(idx[j]);
        json += ", \"top5\": [" + top + "]";
      }
    }
    json += "}";
  }
  return json + "]}";
}

}  // namespace tvmgen_app
