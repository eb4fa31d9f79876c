// JNI bridge: the native methods of org.tvmgen.Model (jni/java/org/tvmgen/Model.java) over the
// C++ runtime (include/tvmgen/runtime.h). Built as libtvmgen_jni_bridge and loaded by
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
// - Nothing here is Android-specific: the same library serves a desktop JVM and an app.
#include <jni.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tvmgen/runtime.h"

namespace {

const char* kModelClass = "org/tvmgen/Model";
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

void JNICALL ConfigureThreads(JNIEnv* env, jclass, jint threads, jint affinity) {
  GuardVoid(env, [&] {
    tvmgen::ThreadOptions options;
    options.threads = threads;
    options.affinity = affinity;
    tvmgen::ConfigureThreads(options);
  });
}

jstring JNICALL RuntimeArch(JNIEnv* env, jclass) { return env->NewStringUTF(tvmgen::RuntimeArch()); }

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
    TVMGEN_NATIVE("nativeConfigureThreads", "(II)V", ConfigureThreads),
    TVMGEN_NATIVE("nativeRuntimeArch", "()Ljava/lang/String;", RuntimeArch),
};

#undef TVMGEN_NATIVE

}  // namespace

// Called by libtvmgen_jni's JNI_OnLoad (so FindClass sees the loading class loader).
extern "C" __attribute__((visibility("default"))) jint TvmgenJniRegister(JNIEnv* env) {
  jclass exception = env->FindClass(kExceptionClass);
  if (exception == nullptr) return JNI_ERR;  // NoClassDefFoundError pending: the jar is not on the class path
  g_exception = static_cast<jclass>(env->NewGlobalRef(exception));
  env->DeleteLocalRef(exception);
  jclass model = env->FindClass(kModelClass);
  if (model == nullptr) return JNI_ERR;
  jint rc = env->RegisterNatives(model, kMethods, sizeof(kMethods) / sizeof(kMethods[0]));
  env->DeleteLocalRef(model);
  return rc == JNI_OK ? JNI_OK : JNI_ERR;  // on failure NoSuchMethodError is pending: Model.java and this file disagree
}

extern "C" __attribute__((visibility("default"))) void TvmgenJniUnregister(JNIEnv* env) {
  if (g_exception != nullptr) {
    env->DeleteGlobalRef(g_exception);
    g_exception = nullptr;
  }
}
