// The native methods behind the low-level tvm4j-style classes org.tvmgen.Module / Function / NDArray
// (declared in NativeLib.java as module*, function*, any*, ndarray*), straight over tvm-ffi.
//
// Each object is a heap-allocated ffi reference (ffi::Module*, ffi::Function*, ffi::Tensor*, and
// ffi::Any* for a call's result while Java decodes it) held in a Java long; deleting it (the
// class's close()) drops one reference. NDArray data cross only through the runtime's
// TVMTensorCopyFromBytes / TVMTensorCopyToBytes, so device memory is never dereferenced here;
// Java arrays are pinned (PinnedArray) for that copy only.
#include <dlfcn.h>
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
#include <string>
#include <utility>
#include <vector>

#include "jni_util.h"
#include "tvmgen/runtime.h"

namespace tvmgen {
namespace jni {
namespace {

namespace ffi = tvm::ffi;

// A function the TVM runtime registers; the error names it when absent.
ffi::Function RuntimeGlobal(const char* name) {
  auto f = ffi::Function::GetGlobal(name);
  if (!f.has_value()) {
    throw tvmgen::Error(std::string("the TVM runtime lacks the function ") + name +
                        " (is libtvm_runtime loaded, and version 0.27?)");
  }
  return *f;
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
  GuardVoid(env, [&] {
    ffi::Tensor t = *HandleTo<ffi::Tensor>(handle, "NDArray");
    PinnedArray pinned(env, array, static_cast<size_t>(element_bytes),
                       to_tensor ? PinnedArray::kRead : PinnedArray::kReadWrite, "the array");
    CopyBytes(t, pinned.data(), pinned.nbytes(), to_tensor);
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

}  // namespace

std::vector<JNINativeMethod> FfiNatives() {
  return {
      Native("moduleLoad", "(Ljava/lang/String;)J", ModuleLoad),
      Native("moduleFree", "(J)V", ModuleFree),
      Native("moduleGetFunction", "(JLjava/lang/String;Z)J", ModuleGetFunction),
      Native("moduleKind", "(J)Ljava/lang/String;", ModuleKind),
      Native("functionGetGlobal", "(Ljava/lang/String;)J", FunctionGetGlobal),
      Native("functionFree", "(J)V", FunctionFree),
      Native("functionCall", "(J[I[J[D[Ljava/lang/Object;)J", FunctionCall),
      Native("anyFree", "(J)V", AnyFree),
      Native("anyKind", "(J)I", AnyKind),
      Native("anyTypeKey", "(J)Ljava/lang/String;", AnyTypeKey),
      Native("anyLong", "(J)J", AnyLong),
      Native("anyDouble", "(J)D", AnyDouble),
      Native("anyString", "(J)[B", AnyString),
      Native("anyShape", "(J)[J", AnyShape),
      Native("anyObject", "(J)J", AnyObject),
      Native("anyArraySize", "(J)I", AnyArraySize),
      Native("anyArrayItem", "(JI)J", AnyArrayItem),
      Native("ndarrayEmpty", "([JLjava/lang/String;IILjava/lang/String;)J", NDArrayEmpty),
      Native("ndarrayFree", "(J)V", NDArrayFree),
      Native("ndarrayShape", "(J)[J", NDArrayShape),
      Native("ndarrayDtype", "(J)Ljava/lang/String;", NDArrayDtype),
      Native("ndarrayDevice", "(J)J", NDArrayDevice),
      Native("ndarrayByteSize", "(J)J", NDArrayByteSize),
      Native("ndarrayCopyFromArray", "(JLjava/lang/Object;I)V", NDArrayCopyFromArray),
      Native("ndarrayCopyToArray", "(JLjava/lang/Object;I)V", NDArrayCopyToArray),
      Native("ndarrayCopyFromBuffer", "(JLjava/nio/ByteBuffer;II)V", NDArrayCopyFromBuffer),
      Native("ndarrayCopyToBuffer", "(JLjava/nio/ByteBuffer;II)V", NDArrayCopyToBuffer),
  };
}

}  // namespace jni
}  // namespace tvmgen
