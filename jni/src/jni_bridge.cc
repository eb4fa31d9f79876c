// JNI bridge: the native methods of org.tvmgen.Model (jni/java/org/tvmgen/Model.java) over the
// C++ runtime (include/tvmgen/runtime.h), and those of the low-level tvm4j-style classes
// org.tvmgen.Module / Function / NDArray straight over tvm-ffi (ffi::Module, ffi::Function,
// ffi::Tensor, each a heap-allocated reference held in a Java long and deleted on close()). Built as libtvmgen_jni_bridge and loaded by
// libtvmgen_jni (jni_loader.cc), which keeps the JVM's signal handlers safe from the TVM runtime's
// library constructors and then calls TvmgenJniRegister.
//
// - The methods are registered with RegisterNatives: a Java/C++ signature mismatch fails when the
//   library loads, not at the first call. Only TvmgenJniRegister/TvmgenJniUnregister are exported.
// - A model is a tvmgen::Model* held in a Java long; Model.java guards against use after close.
// - Every C++ exception becomes an org.tvmgen.TvmgenException carrying its message.
// - Direct ByteBuffers are passed by address to SetInput/GetOutput (no copy); float[] arrays are
//   pinned with GetPrimitiveArrayCritical (no copy on HotSpot or ART) for the duration of the
//   runtime's own copy, and no JNI call is made while they are pinned.
// - NDArray data cross only through the runtime's TVMTensorCopyFromBytes / TVMTensorCopyToBytes,
//   so device memory is never dereferenced here.
// - Nothing here is Android-specific: the same library serves a desktop JVM and an app.
#include <dlfcn.h>
#include <jni.h>
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tvmgen/runtime.h"

namespace {

namespace ffi = tvm::ffi;

const char* kModelClass = "org/tvmgen/Model";
const char* kModuleClass = "org/tvmgen/Module";
const char* kFunctionClass = "org/tvmgen/Function";
const char* kNDArrayClass = "org/tvmgen/NDArray";
const char* kExceptionClass = "org/tvmgen/TvmgenException";
jclass g_exception = nullptr;  // global reference, made in JNI_OnLoad

void ThrowTvmgen(JNIEnv* env, const std::string& message) {
  if (env->ExceptionCheck()) return;  // keep the first pending exception
  jclass cls = g_exception != nullptr ? g_exception : env->FindClass(kExceptionClass);
  if (cls != nullptr) env->ThrowNew(cls, message.c_str());
}

// Runs `body`, turning any C++ exception into a pending TvmgenException; `fallback` is returned then.
template <typename T, typename F>
T Guard(JNIEnv* env, T fallback, F body) {
  try {
    return body();
  } catch (const ffi::Error& e) {  // what() is the message alone: add the kind (ValueError, ...)
    ThrowTvmgen(env, e.kind() + ": " + e.message());
  } catch (const std::exception& e) {
    ThrowTvmgen(env, e.what());
  } catch (...) {
    ThrowTvmgen(env, "unknown native error in the tvmgen runtime");
  }
  return fallback;
}

template <typename F>
void GuardVoid(JNIEnv* env, F body) {
  Guard<int>(env, 0, [&] {
    body();
    return 0;
  });
}

tvmgen::Model* ModelOf(jlong handle) {
  if (handle == 0) throw tvmgen::Error("the model is closed");
  return reinterpret_cast<tvmgen::Model*>(static_cast<intptr_t>(handle));
}

std::string ToString(JNIEnv* env, jstring s) {
  if (s == nullptr) return std::string();
  const char* chars = env->GetStringUTFChars(s, nullptr);
  if (chars == nullptr) throw tvmgen::Error("out of memory reading a Java string");
  std::string out(chars);
  env->ReleaseStringUTFChars(s, chars);
  return out;
}

const tvmgen::TensorInfo& InfoAt(tvmgen::Model* m, jboolean outputs, jint index) {
  const auto& list = outputs ? m->outputs() : m->inputs();
  if (index < 0 || static_cast<size_t>(index) >= list.size()) {
    throw tvmgen::Error(std::string(outputs ? "output" : "input") + " index " + std::to_string(index) +
                        " is out of range: the model has " + std::to_string(list.size()) +
                        (outputs ? " outputs" : " inputs"));
  }
  return list[index];
}

// The address of bytes [position, position + length) of a direct buffer, checked against its capacity.
char* DirectRange(JNIEnv* env, jobject buffer, jint position, jint length, const char* what) {
  if (buffer == nullptr) throw tvmgen::Error(std::string(what) + ": the buffer is null");
  void* base = env->GetDirectBufferAddress(buffer);
  jlong capacity = env->GetDirectBufferCapacity(buffer);
  if (base == nullptr || capacity < 0) {
    throw tvmgen::Error(std::string(what) + ": the ByteBuffer is not direct (use ByteBuffer.allocateDirect)");
  }
  if (position < 0 || length < 0 || static_cast<jlong>(position) + length > capacity) {
    throw tvmgen::Error(std::string(what) + ": bytes " + std::to_string(position) + ".." +
                        std::to_string(static_cast<jlong>(position) + length) + " lie outside the buffer's " +
                        std::to_string(capacity) + " bytes");
  }
  return static_cast<char*>(base) + position;
}

// ------------------------------------------------------------------ native methods

jlong JNICALL Load(JNIEnv* env, jclass, jstring dir, jint threads, jint affinity) {
  return Guard<jlong>(env, 0, [&] {
    tvmgen::ThreadOptions options;
    options.threads = threads;
    options.affinity = affinity;
    std::unique_ptr<tvmgen::Model> model = tvmgen::Model::Load(ToString(env, dir), options);
    return static_cast<jlong>(reinterpret_cast<intptr_t>(model.release()));
  });
}

void JNICALL Free(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { delete reinterpret_cast<tvmgen::Model*>(static_cast<intptr_t>(handle)); });
}

jstring JNICALL DeviceName(JNIEnv* env, jclass, jlong handle) {
  return Guard<jstring>(env, nullptr, [&] { return env->NewStringUTF(ModelOf(handle)->device().c_str()); });
}

jint JNICALL TensorCount(JNIEnv* env, jclass, jlong handle, jboolean outputs) {
  return Guard<jint>(env, 0, [&] {
    tvmgen::Model* m = ModelOf(handle);
    return static_cast<jint>(outputs ? m->outputs().size() : m->inputs().size());
  });
}

jstring JNICALL TensorName(JNIEnv* env, jclass, jlong handle, jboolean outputs, jint index) {
  return Guard<jstring>(env, nullptr,
                        [&] { return env->NewStringUTF(InfoAt(ModelOf(handle), outputs, index).name.c_str()); });
}

jstring JNICALL TensorDtype(JNIEnv* env, jclass, jlong handle, jboolean outputs, jint index) {
  return Guard<jstring>(env, nullptr,
                        [&] { return env->NewStringUTF(InfoAt(ModelOf(handle), outputs, index).dtype.c_str()); });
}

jlongArray JNICALL TensorShape(JNIEnv* env, jclass, jlong handle, jboolean outputs, jint index) {
  return Guard<jlongArray>(env, nullptr, [&]() -> jlongArray {
    const auto& shape = InfoAt(ModelOf(handle), outputs, index).shape;
    jlongArray arr = env->NewLongArray(static_cast<jsize>(shape.size()));
    if (arr == nullptr) return nullptr;  // OutOfMemoryError pending
    std::vector<jlong> dims(shape.begin(), shape.end());
    env->SetLongArrayRegion(arr, 0, static_cast<jsize>(dims.size()), dims.data());
    return arr;
  });
}

jlong JNICALL TensorByteSize(JNIEnv* env, jclass, jlong handle, jboolean outputs, jint index) {
  return Guard<jlong>(env, 0, [&] { return static_cast<jlong>(InfoAt(ModelOf(handle), outputs, index).nbytes); });
}

jint JNICALL InputIndex(JNIEnv* env, jclass, jlong handle, jstring name) {
  return Guard<jint>(env, -1, [&] { return static_cast<jint>(ModelOf(handle)->InputIndex(ToString(env, name))); });
}

void JNICALL SetInputFloats(JNIEnv* env, jclass, jlong handle, jint index, jfloatArray data) {
  std::string error;
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    if (data == nullptr) throw tvmgen::Error("input " + std::to_string(index) + ": the array is null");
    size_t nbytes = static_cast<size_t>(env->GetArrayLength(data)) * sizeof(jfloat);
    void* ptr = env->GetPrimitiveArrayCritical(data, nullptr);
    if (ptr == nullptr) throw tvmgen::Error("cannot access the input array (out of memory)");
    // No JNI calls until the array is released: errors are kept and thrown afterwards.
    try {
      m->SetInput(index, ptr, nbytes);
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown native error in the tvmgen runtime";
    }
    env->ReleasePrimitiveArrayCritical(data, ptr, JNI_ABORT);  // read only: nothing to copy back
    if (!error.empty()) throw tvmgen::Error(error);
  });
}

void JNICALL SetInputBuffer(JNIEnv* env, jclass, jlong handle, jint index, jobject buffer, jint position,
                            jint length) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    char* ptr = DirectRange(env, buffer, position, length, ("input " + std::to_string(index)).c_str());
    m->SetInput(index, ptr, static_cast<size_t>(length));
  });
}

void JNICALL Run(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { ModelOf(handle)->Run(); });
}

void JNICALL GetOutputFloats(JNIEnv* env, jclass, jlong handle, jint index, jfloatArray out) {
  std::string error;
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    if (out == nullptr) throw tvmgen::Error("output " + std::to_string(index) + ": the array is null");
    size_t nbytes = static_cast<size_t>(env->GetArrayLength(out)) * sizeof(jfloat);
    void* ptr = env->GetPrimitiveArrayCritical(out, nullptr);
    if (ptr == nullptr) throw tvmgen::Error("cannot access the output array (out of memory)");
    try {
      m->GetOutput(index, ptr, nbytes);
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown native error in the tvmgen runtime";
    }
    env->ReleasePrimitiveArrayCritical(out, ptr, 0);  // 0: copy back if the VM gave us a copy
    if (!error.empty()) throw tvmgen::Error(error);
  });
}

void JNICALL GetOutputBuffer(JNIEnv* env, jclass, jlong handle, jint index, jobject buffer, jint position,
                             jint length) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    char* ptr = DirectRange(env, buffer, position, length, ("output " + std::to_string(index)).c_str());
    m->GetOutput(index, ptr, static_cast<size_t>(length));
  });
}

jdoubleArray JNICALL TimingsOf(JNIEnv* env, jclass, jlong handle) {
  return Guard<jdoubleArray>(env, nullptr, [&]() -> jdoubleArray {
    const tvmgen::Timings& t = ModelOf(handle)->timings();
    jdouble values[7] = {t.load_ms, t.init_ms, t.first_run_ms, t.copy_in_ms, t.run_ms, t.copy_out_ms,
                         static_cast<jdouble>(t.runs)};
    jdoubleArray arr = env->NewDoubleArray(7);
    if (arr == nullptr) return nullptr;
    env->SetDoubleArrayRegion(arr, 0, 7, values);
    return arr;
  });
}

jstring JNICALL ProfileOf(JNIEnv* env, jclass, jlong handle, jint runs) {
  return Guard<jstring>(env, nullptr, [&]() -> jstring {
    if (runs < 1) throw tvmgen::Error("profile: runs must be at least 1, got " + std::to_string(runs));
    std::string json = ModelOf(handle)->Profile(static_cast<int>(runs));
    jstring s = env->NewStringUTF(json.c_str());  // kernel names are ASCII; NewStringUTF reads modified UTF-8
    if (s == nullptr) throw tvmgen::Error("out of memory returning the profile");  // OutOfMemoryError kept
    return s;
  });
}

// {VmRSS, VmHWM} of this process (tvmgen::ReadResidentMemory: /proc/self/status; zeros elsewhere).
jlongArray JNICALL ResidentMemoryOf(JNIEnv* env, jclass) {
  return Guard<jlongArray>(env, nullptr, [&] {
    tvmgen::ResidentMemory m = tvmgen::ReadResidentMemory();
    jlong values[2] = {static_cast<jlong>(m.rss_bytes), static_cast<jlong>(m.peak_bytes)};
    jlongArray arr = env->NewLongArray(2);
    if (arr == nullptr) return arr;  // OutOfMemoryError pending
    env->SetLongArrayRegion(arr, 0, 2, values);
    return arr;
  });
}

void JNICALL ConfigureThreads(JNIEnv* env, jclass, jint threads, jint affinity) {
  GuardVoid(env, [&] {
    tvmgen::ThreadOptions options;
    options.threads = threads;
    options.affinity = affinity;
    tvmgen::ConfigureThreads(options);
  });
}

jstring JNICALL RuntimeArch(JNIEnv* env, jclass) { return env->NewStringUTF(tvmgen::RuntimeArch()); }

// ------------------------------------------------------------------ Module / Function / NDArray (tvm-ffi)
// Each object is a heap-allocated ffi reference (ffi::Module*, ffi::Function*, ffi::Tensor*, and
// ffi::Any* for a call's result while Java decodes it) in a Java long; deleting it drops one reference.

template <typename T>
T* HandleTo(jlong handle, const char* what) {
  if (handle == 0) throw tvmgen::Error(std::string("the ") + what + " is closed");
  return reinterpret_cast<T*>(static_cast<intptr_t>(handle));
}

template <typename T>
jlong NewHandle(T value) {
  return static_cast<jlong>(reinterpret_cast<intptr_t>(new T(std::move(value))));
}

template <typename T>
void DeleteHandle(jlong handle) {
  delete reinterpret_cast<T*>(static_cast<intptr_t>(handle));
}

// A function the TVM runtime registers; the error names it when absent.
ffi::Function RuntimeGlobal(const char* name) {
  auto f = ffi::Function::GetGlobal(name);
  if (!f.has_value()) {
    throw tvmgen::Error(std::string("the TVM runtime lacks the function ") + name +
                        " (is libtvm_runtime loaded, and version 0.27?)");
  }
  return *f;
}

void CheckJava(JNIEnv* env) {
  if (env->ExceptionCheck()) throw tvmgen::Error("a Java exception is pending");  // not thrown over it: ThrowTvmgen keeps it
}

std::string BytesOf(JNIEnv* env, jbyteArray bytes) {
  jsize n = env->GetArrayLength(bytes);
  std::string out(static_cast<size_t>(n), '\0');
  if (n > 0) env->GetByteArrayRegion(bytes, 0, n, reinterpret_cast<jbyte*>(&out[0]));
  CheckJava(env);
  return out;
}

jbyteArray NewBytes(JNIEnv* env, const char* data, size_t size) {
  jbyteArray arr = env->NewByteArray(static_cast<jsize>(size));
  if (arr == nullptr) throw tvmgen::Error("out of memory");  // OutOfMemoryError pending, kept
  env->SetByteArrayRegion(arr, 0, static_cast<jsize>(size), reinterpret_cast<const jbyte*>(data));
  return arr;
}

jlongArray NewLongs(JNIEnv* env, const int64_t* data, size_t size) {
  jlongArray arr = env->NewLongArray(static_cast<jsize>(size));
  if (arr == nullptr) throw tvmgen::Error("out of memory");
  std::vector<jlong> values(data, data + size);
  env->SetLongArrayRegion(arr, 0, static_cast<jsize>(size), values.data());
  return arr;
}

std::vector<int64_t> LongsOf(JNIEnv* env, jlongArray arr) {
  if (arr == nullptr) throw tvmgen::Error("the shape is null");
  jsize n = env->GetArrayLength(arr);
  std::vector<jlong> values(static_cast<size_t>(n));
  if (n > 0) env->GetLongArrayRegion(arr, 0, n, values.data());
  CheckJava(env);
  return std::vector<int64_t>(values.begin(), values.end());
}

// The kinds of values crossing Function.call, as Function.java numbers them.
enum Kind : jint {
  kNone = 0, kInt = 1, kBool = 2, kFloat = 3, kString = 4, kTensor = 5, kModule = 6, kFunction = 7,
  kArray = 8, kShape = 9, kOther = -1
};

Kind KindOf(const ffi::Any& v) {
  switch (v.type_index()) {
    case ffi::TypeIndex::kTVMFFINone: return kNone;
    case ffi::TypeIndex::kTVMFFIInt: return kInt;
    case ffi::TypeIndex::kTVMFFIBool: return kBool;
    case ffi::TypeIndex::kTVMFFIFloat: return kFloat;
    case ffi::TypeIndex::kTVMFFISmallStr:
    case ffi::TypeIndex::kTVMFFIStr: return kString;
    case ffi::TypeIndex::kTVMFFITensor: return kTensor;
    case ffi::TypeIndex::kTVMFFIShape: return kShape;
    case ffi::TypeIndex::kTVMFFIArray:
    case ffi::TypeIndex::kTVMFFIList: return kArray;
    case ffi::TypeIndex::kTVMFFIFunction: return kFunction;
    default: break;
  }
  // Modules are subclasses (relax.VirtualMachine, the library module, ...): checked by inheritance.
  if (v.as<ffi::Module>().has_value()) return kModule;
  if (v.as<ffi::Tensor>().has_value()) return kTensor;
  return kOther;
}

// Backends are separate libraries in TVM 0.27 (libtvm_runtime_opencl.so, ...): load the device's
// one from libtvm_runtime's directory (or the library search path) unless it is registered already.
void EnsureBackend(int device_type, const std::string& name) {
  if (device_type == kDLCPU) return;
  std::string want = "device_api." + name;
  if (ffi::Function::GetGlobal(want).has_value()) return;
  std::string lib = "libtvm_runtime_" + name + ".so";
  Dl_info info;
  std::string dir;
  if (dladdr(reinterpret_cast<void*>(&TVMFFIFunctionGetGlobal), &info) && info.dli_fname) {
    dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
  }
  void* handle = dlopen((dir + lib).c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr || !ffi::Function::GetGlobal(want).has_value()) {
    throw tvmgen::Error("this TVM runtime has no " + name + " support (" + want + " is not registered and " + lib +
                        " could not be loaded)");
  }
}

// --- Module

jlong JNICALL ModuleLoad(JNIEnv* env, jclass, jstring jpath) {
  return Guard<jlong>(env, 0, [&] {
    std::string path = ToString(env, jpath);
    std::string arch = tvmgen::LibraryArch(path);
    if (arch == "unreadable") throw tvmgen::Error("cannot read the library " + path);
    if (arch != "not-elf" && arch != tvmgen::RuntimeArch()) {
      throw tvmgen::Error("the library " + path + " is built for " + arch + ", this device is " +
                          tvmgen::RuntimeArch() + ": compile it for this device's platform");
    }
    try {
      return NewHandle(ffi::Module::LoadFromFile(path));
    } catch (const ffi::Error& e) {
      throw tvmgen::Error("cannot load the library " + path + ": " + e.kind() + ": " + e.message());
    }
  });
}

void JNICALL ModuleFree(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { DeleteHandle<ffi::Module>(handle); });
}

jlong JNICALL ModuleGetFunction(JNIEnv* env, jclass, jlong handle, jstring name, jboolean query_imports) {
  return Guard<jlong>(env, 0, [&]() -> jlong {
    ffi::Module* mod = HandleTo<ffi::Module>(handle, "module");
    ffi::Optional<ffi::Function> f = (*mod)->GetFunction(ffi::String(ToString(env, name)), query_imports != JNI_FALSE);
    if (!f.has_value()) return 0;
    return NewHandle(*f);
  });
}

jstring JNICALL ModuleKind(JNIEnv* env, jclass, jlong handle) {
  return Guard<jstring>(env, nullptr, [&] { return env->NewStringUTF((*HandleTo<ffi::Module>(handle, "module"))->kind()); });
}

// --- Function

jlong JNICALL FunctionGetGlobal(JNIEnv* env, jclass, jstring name) {
  return Guard<jlong>(env, 0, [&]() -> jlong {
    auto f = ffi::Function::GetGlobal(ToString(env, name));
    return f.has_value() ? NewHandle(*f) : 0;
  });
}

void JNICALL FunctionFree(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { DeleteHandle<ffi::Function>(handle); });
}

// kinds[i] says how argument i travels: an int/bool/handle in longs[i], a float in doubles[i],
// a string (UTF-8 byte[]) or a shape (long[]) in objects[i].
jlong JNICALL FunctionCall(JNIEnv* env, jclass, jlong handle, jintArray jkinds, jlongArray jlongs,
                           jdoubleArray jdoubles, jobjectArray objects) {
  return Guard<jlong>(env, 0, [&] {
    ffi::Function* fn = HandleTo<ffi::Function>(handle, "function");
    jsize n = env->GetArrayLength(jkinds);
    std::vector<jint> kinds(static_cast<size_t>(n));
    std::vector<jlong> longs(static_cast<size_t>(n));
    std::vector<jdouble> doubles(static_cast<size_t>(n));
    if (n > 0) {
      env->GetIntArrayRegion(jkinds, 0, n, kinds.data());
      env->GetLongArrayRegion(jlongs, 0, n, longs.data());
      env->GetDoubleArrayRegion(jdoubles, 0, n, doubles.data());
    }
    CheckJava(env);
    std::vector<ffi::Any> args(static_cast<size_t>(n));
    for (jsize i = 0; i < n; ++i) {
      switch (kinds[i]) {
        case kNone: break;
        case kInt: args[i] = static_cast<int64_t>(longs[i]); break;
        case kBool: args[i] = longs[i] != 0; break;
        case kFloat: args[i] = static_cast<double>(doubles[i]); break;
        case kTensor: args[i] = *HandleTo<ffi::Tensor>(longs[i], "NDArray argument"); break;
        case kModule: args[i] = *HandleTo<ffi::Module>(longs[i], "Module argument"); break;
        case kFunction: args[i] = *HandleTo<ffi::Function>(longs[i], "Function argument"); break;
        case kString:
        case kShape: {
          jobject obj = env->GetObjectArrayElement(objects, i);
          CheckJava(env);
          try {
            if (kinds[i] == kString) {
              args[i] = ffi::String(BytesOf(env, static_cast<jbyteArray>(obj)));
            } else {
              args[i] = ffi::Shape(LongsOf(env, static_cast<jlongArray>(obj)));
            }
          } catch (...) {
            env->DeleteLocalRef(obj);
            throw;
          }
          env->DeleteLocalRef(obj);
          break;
        }
        default: throw tvmgen::Error("argument " + std::to_string(i) + " has an unknown kind " + std::to_string(kinds[i]));
      }
    }
    std::vector<ffi::AnyView> views(args.begin(), args.end());
    ffi::Any ret;
    fn->CallPacked(views.data(), static_cast<int32_t>(views.size()), &ret);
    return NewHandle(std::move(ret));
  });
}

void JNICALL AnyFree(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { DeleteHandle<ffi::Any>(handle); });
}

jint JNICALL AnyKind(JNIEnv* env, jclass, jlong handle) {
  return Guard<jint>(env, kOther, [&] { return static_cast<jint>(KindOf(*HandleTo<ffi::Any>(handle, "result"))); });
}

jstring JNICALL AnyTypeKey(JNIEnv* env, jclass, jlong handle) {
  return Guard<jstring>(env, nullptr,
                        [&] { return env->NewStringUTF(HandleTo<ffi::Any>(handle, "result")->GetTypeKey().c_str()); });
}

jlong JNICALL AnyLong(JNIEnv* env, jclass, jlong handle) {
  return Guard<jlong>(env, 0, [&]() -> jlong {
    const ffi::Any& v = *HandleTo<ffi::Any>(handle, "result");
    if (v.type_index() == ffi::TypeIndex::kTVMFFIBool) return v.cast<bool>() ? 1 : 0;
    return static_cast<jlong>(v.cast<int64_t>());
  });
}

jdouble JNICALL AnyDouble(JNIEnv* env, jclass, jlong handle) {
  return Guard<jdouble>(env, 0, [&] { return static_cast<jdouble>(HandleTo<ffi::Any>(handle, "result")->cast<double>()); });
}

jbyteArray JNICALL AnyString(JNIEnv* env, jclass, jlong handle) {
  return Guard<jbyteArray>(env, nullptr, [&] {
    ffi::String s = HandleTo<ffi::Any>(handle, "result")->cast<ffi::String>();
    return NewBytes(env, s.data(), s.size());
  });
}

jlongArray JNICALL AnyShape(JNIEnv* env, jclass, jlong handle) {
  return Guard<jlongArray>(env, nullptr, [&] {
    ffi::Shape s = HandleTo<ffi::Any>(handle, "result")->cast<ffi::Shape>();
    return NewLongs(env, s.data(), s.size());
  });
}

// A new handle of the object's own type (ffi::Tensor*, ffi::Module* or ffi::Function*).
jlong JNICALL AnyObject(JNIEnv* env, jclass, jlong handle) {
  return Guard<jlong>(env, 0, [&]() -> jlong {
    const ffi::Any& v = *HandleTo<ffi::Any>(handle, "result");
    switch (KindOf(v)) {
      case kTensor: return NewHandle(v.cast<ffi::Tensor>());
      case kModule: return NewHandle(v.cast<ffi::Module>());
      case kFunction: return NewHandle(v.cast<ffi::Function>());
      default: throw tvmgen::Error("the result is " + v.GetTypeKey() + ", not a tensor, module or function");
    }
  });
}

jint JNICALL AnyArraySize(JNIEnv* env, jclass, jlong handle) {
  return Guard<jint>(env, 0, [&] {
    return static_cast<jint>(HandleTo<ffi::Any>(handle, "result")->cast<ffi::Array<ffi::Any>>().size());
  });
}

jlong JNICALL AnyArrayItem(JNIEnv* env, jclass, jlong handle, jint index) {
  return Guard<jlong>(env, 0, [&] {
    ffi::Array<ffi::Any> items = HandleTo<ffi::Any>(handle, "result")->cast<ffi::Array<ffi::Any>>();
    if (index < 0 || static_cast<size_t>(index) >= items.size()) {
      throw tvmgen::Error("array index " + std::to_string(index) + " is out of range");
    }
    return NewHandle(ffi::Any(items[index]));
  });
}

// --- NDArray

size_t TensorBytes(const ffi::Tensor& t) {
  DLDataType d = t.dtype();
  return static_cast<size_t>(t.numel()) * ((d.bits * d.lanes + 7) / 8);
}

jlong JNICALL NDArrayEmpty(JNIEnv* env, jclass, jlongArray jshape, jstring jdtype, jint device_type, jint device_id,
                           jstring device_name) {
  return Guard<jlong>(env, 0, [&] {
    std::vector<int64_t> shape = LongsOf(env, jshape);
    for (int64_t d : shape) {
      if (d < 0) throw tvmgen::Error("a tensor's dimensions must be >= 0, got " + std::to_string(d));
    }
    std::string dtype = ToString(env, jdtype);
    DLDataType dt;
    try {
      dt = ffi::StringToDLDataType(dtype);
    } catch (const ffi::Error&) {
      throw tvmgen::Error("unknown dtype \"" + dtype + "\": use float32, float16, int64, int32, int8, uint8, bool, ...");
    }
    EnsureBackend(device_type, ToString(env, device_name));
    static ffi::Function alloc = RuntimeGlobal("runtime.TVMTensorAllocWithScope");
    DLDevice dev{static_cast<DLDeviceType>(device_type), static_cast<int>(device_id)};
    ffi::Tensor t = alloc(ffi::Shape(shape), dt, dev, ffi::Optional<ffi::String>()).cast<ffi::Tensor>();
    return NewHandle(std::move(t));
  });
}

void JNICALL NDArrayFree(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { DeleteHandle<ffi::Tensor>(handle); });
}

jlongArray JNICALL NDArrayShape(JNIEnv* env, jclass, jlong handle) {
  return Guard<jlongArray>(env, nullptr, [&] {
    ffi::ShapeView s = HandleTo<ffi::Tensor>(handle, "NDArray")->shape();
    return NewLongs(env, s.data(), s.size());
  });
}

jstring JNICALL NDArrayDtype(JNIEnv* env, jclass, jlong handle) {
  return Guard<jstring>(env, nullptr, [&] {
    std::string s = ffi::DLDataTypeToString(HandleTo<ffi::Tensor>(handle, "NDArray")->dtype());
    return env->NewStringUTF(s.c_str());
  });
}

jlong JNICALL NDArrayDevice(JNIEnv* env, jclass, jlong handle) {  // type << 32 | id
  return Guard<jlong>(env, 0, [&] {
    DLDevice d = HandleTo<ffi::Tensor>(handle, "NDArray")->device();
    return (static_cast<jlong>(d.device_type) << 32) | static_cast<jlong>(static_cast<uint32_t>(d.device_id));
  });
}

jlong JNICALL NDArrayByteSize(JNIEnv* env, jclass, jlong handle) {
  return Guard<jlong>(env, 0, [&] { return static_cast<jlong>(TensorBytes(*HandleTo<ffi::Tensor>(handle, "NDArray"))); });
}

// One host <-> tensor copy through the runtime's CopyFromBytes / CopyToBytes (never a device pointer).
void CopyBytes(const ffi::Tensor& t, void* data, size_t nbytes, bool to_tensor) {
  size_t want = TensorBytes(t);
  std::string dtype = ffi::DLDataTypeToString(t.dtype());
  if (nbytes != want) {
    throw tvmgen::Error("the NDArray (" + dtype + ") " + (to_tensor ? "takes " : "holds ") + std::to_string(want) +
                        " bytes, " + (to_tensor ? "the source has " : "the destination has ") +
                        std::to_string(nbytes));
  }
  if (!t.IsContiguous()) throw tvmgen::Error("the NDArray is not contiguous: it cannot be copied as bytes");
  static ffi::Function from_bytes = RuntimeGlobal("runtime.TVMTensorCopyFromBytes");
  static ffi::Function to_bytes = RuntimeGlobal("runtime.TVMTensorCopyToBytes");
  if (nbytes == 0) return;
  if (to_tensor) {
    from_bytes(t, data, static_cast<int64_t>(nbytes));
  } else {
    to_bytes(t, data, static_cast<int64_t>(nbytes));
  }
}

// A primitive array of `element_bytes`-byte elements, pinned only for the copy (no JNI call meanwhile).
void CopyArray(JNIEnv* env, jlong handle, jarray array, jint element_bytes, bool to_tensor) {
  std::string error;
  GuardVoid(env, [&] {
    ffi::Tensor t = *HandleTo<ffi::Tensor>(handle, "NDArray");
    if (array == nullptr) throw tvmgen::Error("the array is null");
    size_t nbytes = static_cast<size_t>(env->GetArrayLength(array)) * static_cast<size_t>(element_bytes);
    void* ptr = env->GetPrimitiveArrayCritical(array, nullptr);
    if (ptr == nullptr) throw tvmgen::Error("cannot access the array (out of memory)");
    try {
      CopyBytes(t, ptr, nbytes, to_tensor);
    } catch (const ffi::Error& e) {
      error = e.kind() + ": " + e.message();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown native error in the tvmgen runtime";
    }
    env->ReleasePrimitiveArrayCritical(array, ptr, to_tensor ? JNI_ABORT : 0);
    if (!error.empty()) throw tvmgen::Error(error);
  });
}

void JNICALL NDArrayCopyFromArray(JNIEnv* env, jclass, jlong handle, jobject array, jint element_bytes) {
  CopyArray(env, handle, static_cast<jarray>(array), element_bytes, true);
}

void JNICALL NDArrayCopyToArray(JNIEnv* env, jclass, jlong handle, jobject array, jint element_bytes) {
  CopyArray(env, handle, static_cast<jarray>(array), element_bytes, false);
}

void JNICALL NDArrayCopyFromBuffer(JNIEnv* env, jclass, jlong handle, jobject buffer, jint position, jint length) {
  GuardVoid(env, [&] {
    ffi::Tensor t = *HandleTo<ffi::Tensor>(handle, "NDArray");
    char* ptr = DirectRange(env, buffer, position, length, "NDArray.copyFrom");
    CopyBytes(t, ptr, static_cast<size_t>(length), true);
  });
}

void JNICALL NDArrayCopyToBuffer(JNIEnv* env, jclass, jlong handle, jobject buffer, jint position, jint length) {
  GuardVoid(env, [&] {
    ffi::Tensor t = *HandleTo<ffi::Tensor>(handle, "NDArray");
    char* ptr = DirectRange(env, buffer, position, length, "NDArray.copyTo");
    CopyBytes(t, ptr, static_cast<size_t>(length), false);
  });
}

#define TVMGEN_NATIVE(name, sig, fn) {const_cast<char*>(name), const_cast<char*>(sig), reinterpret_cast<void*>(fn)}

const JNINativeMethod kMethods[] = {
    TVMGEN_NATIVE("nativeLoad", "(Ljava/lang/String;II)J", Load),
    TVMGEN_NATIVE("nativeFree", "(J)V", Free),
    TVMGEN_NATIVE("nativeDevice", "(J)Ljava/lang/String;", DeviceName),
    TVMGEN_NATIVE("nativeTensorCount", "(JZ)I", TensorCount),
    TVMGEN_NATIVE("nativeTensorName", "(JZI)Ljava/lang/String;", TensorName),
    TVMGEN_NATIVE("nativeTensorDtype", "(JZI)Ljava/lang/String;", TensorDtype),
    TVMGEN_NATIVE("nativeTensorShape", "(JZI)[J", TensorShape),
    TVMGEN_NATIVE("nativeTensorByteSize", "(JZI)J", TensorByteSize),
    TVMGEN_NATIVE("nativeInputIndex", "(JLjava/lang/String;)I", InputIndex),
    TVMGEN_NATIVE("nativeSetInputFloats", "(JI[F)V", SetInputFloats),
    TVMGEN_NATIVE("nativeSetInputBuffer", "(JILjava/nio/ByteBuffer;II)V", SetInputBuffer),
    TVMGEN_NATIVE("nativeRun", "(J)V", Run),
    TVMGEN_NATIVE("nativeGetOutputFloats", "(JI[F)V", GetOutputFloats),
    TVMGEN_NATIVE("nativeGetOutputBuffer", "(JILjava/nio/ByteBuffer;II)V", GetOutputBuffer),
    TVMGEN_NATIVE("nativeTimings", "(J)[D", TimingsOf),
    TVMGEN_NATIVE("nativeProfile", "(JI)Ljava/lang/String;", ProfileOf),
    TVMGEN_NATIVE("nativeResidentMemory", "()[J", ResidentMemoryOf),
    TVMGEN_NATIVE("nativeConfigureThreads", "(II)V", ConfigureThreads),
    TVMGEN_NATIVE("nativeRuntimeArch", "()Ljava/lang/String;", RuntimeArch),
};

const JNINativeMethod kModuleMethods[] = {
    TVMGEN_NATIVE("nativeLoad", "(Ljava/lang/String;)J", ModuleLoad),
    TVMGEN_NATIVE("nativeFree", "(J)V", ModuleFree),
    TVMGEN_NATIVE("nativeGetFunction", "(JLjava/lang/String;Z)J", ModuleGetFunction),
    TVMGEN_NATIVE("nativeKind", "(J)Ljava/lang/String;", ModuleKind),
};

const JNINativeMethod kFunctionMethods[] = {
    TVMGEN_NATIVE("nativeGetGlobal", "(Ljava/lang/String;)J", FunctionGetGlobal),
    TVMGEN_NATIVE("nativeFree", "(J)V", FunctionFree),
    TVMGEN_NATIVE("nativeCall", "(J[I[J[D[Ljava/lang/Object;)J", FunctionCall),
    TVMGEN_NATIVE("nativeAnyFree", "(J)V", AnyFree),
    TVMGEN_NATIVE("nativeAnyKind", "(J)I", AnyKind),
    TVMGEN_NATIVE("nativeAnyTypeKey", "(J)Ljava/lang/String;", AnyTypeKey),
    TVMGEN_NATIVE("nativeAnyLong", "(J)J", AnyLong),
    TVMGEN_NATIVE("nativeAnyDouble", "(J)D", AnyDouble),
    TVMGEN_NATIVE("nativeAnyString", "(J)[B", AnyString),
    TVMGEN_NATIVE("nativeAnyShape", "(J)[J", AnyShape),
    TVMGEN_NATIVE("nativeAnyObject", "(J)J", AnyObject),
    TVMGEN_NATIVE("nativeAnyArraySize", "(J)I", AnyArraySize),
    TVMGEN_NATIVE("nativeAnyArrayItem", "(JI)J", AnyArrayItem),
};

const JNINativeMethod kNDArrayMethods[] = {
    TVMGEN_NATIVE("nativeEmpty", "([JLjava/lang/String;IILjava/lang/String;)J", NDArrayEmpty),
    TVMGEN_NATIVE("nativeFree", "(J)V", NDArrayFree),
    TVMGEN_NATIVE("nativeShape", "(J)[J", NDArrayShape),
    TVMGEN_NATIVE("nativeDtype", "(J)Ljava/lang/String;", NDArrayDtype),
    TVMGEN_NATIVE("nativeDevice", "(J)J", NDArrayDevice),
    TVMGEN_NATIVE("nativeByteSize", "(J)J", NDArrayByteSize),
    TVMGEN_NATIVE("nativeCopyFromArray", "(JLjava/lang/Object;I)V", NDArrayCopyFromArray),
    TVMGEN_NATIVE("nativeCopyToArray", "(JLjava/lang/Object;I)V", NDArrayCopyToArray),
    TVMGEN_NATIVE("nativeCopyFromBuffer", "(JLjava/nio/ByteBuffer;II)V", NDArrayCopyFromBuffer),
    TVMGEN_NATIVE("nativeCopyToBuffer", "(JLjava/nio/ByteBuffer;II)V", NDArrayCopyToBuffer),
};

#undef TVMGEN_NATIVE

// RegisterNatives on one class; false with NoClassDefFoundError / NoSuchMethodError pending.
template <size_t N>
bool Register(JNIEnv* env, const char* class_name, const JNINativeMethod (&methods)[N]) {
  jclass cls = env->FindClass(class_name);
  if (cls == nullptr) return false;
  jint rc = env->RegisterNatives(cls, methods, static_cast<jint>(N));
  env->DeleteLocalRef(cls);
  return rc == JNI_OK;
}

}  // namespace

// Called by libtvmgen_jni's JNI_OnLoad (so FindClass sees the loading class loader).
extern "C" __attribute__((visibility("default"))) jint TvmgenJniRegister(JNIEnv* env) {
  jclass exception = env->FindClass(kExceptionClass);
  if (exception == nullptr) return JNI_ERR;  // NoClassDefFoundError pending: the jar is not on the class path
  g_exception = static_cast<jclass>(env->NewGlobalRef(exception));
  env->DeleteLocalRef(exception);
  // On failure NoClassDefFoundError or NoSuchMethodError is pending: the Java classes and this file disagree.
  bool ok = Register(env, kModelClass, kMethods) && Register(env, kModuleClass, kModuleMethods) &&
            Register(env, kFunctionClass, kFunctionMethods) && Register(env, kNDArrayClass, kNDArrayMethods);
  return ok ? JNI_OK : JNI_ERR;
}

extern "C" __attribute__((visibility("default"))) void TvmgenJniUnregister(JNIEnv* env) {
  if (g_exception != nullptr) {
    env->DeleteGlobalRef(g_exception);
    g_exception = nullptr;
  }
}
