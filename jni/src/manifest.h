// Reading manifest.json, an artifact's description (tvmgen compile writes it), with tvm-ffi's JSON parser:
// each field read with its type checked, an error naming where in the manifest it is. Header-only: the
// runtime (runtime.cc) is its one user, and the iOS app compiles runtime.cc alone.
#pragma once

#include <tvm/ffi/dtype.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace manifest {

namespace ffi = tvm::ffi;
namespace json = tvm::ffi::json;

inline json::Object AsObject(const json::Value& v, const std::string& where) {
  auto obj = v.try_cast<json::Object>();
  if (!obj.has_value()) throw Error("manifest.json: " + where + " is not an object");
  return *obj;
}

inline json::Value Field(json::Object obj, const char* key, const std::string& where) {
  auto it = obj.find(ffi::String(key));
  if (it == obj.end()) throw Error("manifest.json: " + where + " has no \"" + key + "\"");
  return (*it).second;
}

inline std::string Str(json::Object obj, const char* key, const std::string& where) {
  auto v = Field(obj, key, where);
  auto s = v.try_cast<ffi::String>();
  if (!s.has_value()) throw Error("manifest.json: " + where + "." + key + " is not a string");
  return std::string(*s);
}

inline int64_t Int(const json::Value& v, const std::string& where) {
  auto i = v.try_cast<int64_t>();
  if (!i.has_value()) throw Error("manifest.json: " + where + " is not an integer");
  return *i;
}

inline json::Array Arr(json::Object obj, const char* key, const std::string& where) {
  auto v = Field(obj, key, where);
  auto a = v.try_cast<json::Array>();
  if (!a.has_value()) throw Error("manifest.json: " + where + "." + key + " is not a list");
  return *a;
}

inline size_t DtypeBytes(const std::string& dtype) {
  DLDataType t = ffi::StringToDLDataType(dtype == "bool" ? "bool" : dtype);
  return (t.bits * t.lanes + 7) / 8;
}

inline std::vector<TensorInfo> TensorList(json::Object man, const char* key) {
  std::vector<TensorInfo> out;
  for (const json::Value& item : Arr(man, key, "manifest")) {
    std::string where = std::string(key) + "[" + std::to_string(out.size()) + "]";
    json::Object o = AsObject(item, where);
    TensorInfo t;
    t.name = Str(o, "name", where);
    t.dtype = Str(o, "dtype", where);
    size_t n = 1;
    for (const json::Value& d : Arr(o, "shape", where)) {
      t.shape.push_back(Int(d, where + ".shape"));
      n *= static_cast<size_t>(t.shape.back());
    }
    t.nbytes = n * DtypeBytes(t.dtype);
    out.push_back(std::move(t));
  }
  return out;
}

// One entry of the manifest's "state" list: a tensor a streaming model carries from one run to the next.
struct StateEntry {
  std::string input, output;  // the state input main reads it from, the output main returns its next value in
  std::vector<int64_t> shape;
  std::string dtype;
  std::string initial;  // a .npy file relative to the artifact; "" for zeros
};

// The manifest's "state" list (none, or empty, for a stateless model), each field's type checked.
inline std::vector<StateEntry> StateList(json::Object man) {
  std::vector<StateEntry> out;
  auto it = man.find(ffi::String("state"));
  if (it == man.end() || (*it).second == nullptr) return out;
  auto list = (*it).second.try_cast<json::Array>();
  if (!list.has_value()) throw Error("manifest.json: state is not a list");
  for (const json::Value& item : *list) {
    std::string where = "state[" + std::to_string(out.size()) + "]";
    json::Object o = AsObject(item, where);
    StateEntry e;
    e.input = Str(o, "input", where);
    e.output = Str(o, "output", where);
    e.dtype = Str(o, "dtype", where);
    for (const json::Value& d : Arr(o, "shape", where)) e.shape.push_back(Int(d, where + ".shape"));
    auto init = o.find(ffi::String("initial"));
    if (init != o.end() && (*init).second != nullptr) e.initial = Str(o, "initial", where);
    out.push_back(std::move(e));
  }
  return out;
}

// manifest.json's text as its top-level object, its schema version checked; `where` names it in errors.
inline json::Object ParseManifest(const std::string& text, const std::string& where) {
  ffi::String err;
  json::Value root = json::Parse(text, &err);
  if (!err.empty()) throw Error("manifest.json in " + where + " is corrupt: " + std::string(err));
  json::Object man = AsObject(root, "the top level");
  if (Int(Field(man, "schema_version", "manifest"), "schema_version") != 1) {
    throw Error("manifest.json in " + where + " has a schema version this runtime does not read (want 1)");
  }
  return man;
}

// The weights file the manifest names ("" when the weights are inside the library).
inline std::string ParamsFile(json::Object man) {
  auto it = man.find(ffi::String("params"));
  if (it == man.end() || (*it).second == nullptr) return "";
  return Str(AsObject((*it).second, "params"), "file", "params");
}

}  // namespace manifest
}  // namespace tvmgen
