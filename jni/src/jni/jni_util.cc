// Shared JNI helpers (jni_util.h) and the bridge's registration entry points, which libtvmgen_jni's
// JNI_OnLoad / JNI_OnUnload (loader.cc) find with dlsym.
#include "jni_util.h"

#include <string>
#include <vector>

namespace tvmgen {
namespace jni {
namespace {

jclass g_exception = nullptr;  // global reference, made in TvmgenJniRegister

}  // namespace

void ThrowTvmgen(JNIEnv* env, const std::string& message) {
  if (env->ExceptionCheck()) return;  // keep the first pending exception
  jclass cls = g_exception != nullptr ? g_exception : env->FindClass(kExceptionClass);
  if (cls != nullptr) env->ThrowNew(cls, message.c_str());
}

PinnedArray::PinnedArray(JNIEnv* env, jarray array, size_t element_bytes, Access access, const char* what)
    : env_(env), array_(array), release_mode_(access == kRead ? JNI_ABORT : 0) {
  if (array == nullptr) throw tvmgen::Error(std::string(what) + " is null");
  nbytes_ = static_cast<size_t>(env->GetArrayLength(array)) * element_bytes;  // before pinning: a JNI call
  data_ = env->GetPrimitiveArrayCritical(array, nullptr);
  if (data_ == nullptr) throw tvmgen::Error(std::string("cannot access ") + what + " (out of memory)");
}

PinnedArray::~PinnedArray() {
  if (data_ != nullptr) env_->ReleasePrimitiveArrayCritical(array_, data_, release_mode_);
}

std::string ToString(JNIEnv* env, jstring s) {
  if (s == nullptr) return std::string();
  const char* chars = env->GetStringUTFChars(s, nullptr);
  if (chars == nullptr) throw tvmgen::Error("out of memory reading a Java string");
  std::string out(chars);
  env->ReleaseStringUTFChars(s, chars);
  return out;
}

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

}  // namespace jni
}  // namespace tvmgen

// Called by libtvmgen_jni's JNI_OnLoad (so FindClass sees the class loader that loads the library,
// NativeLib's). On failure an exception is pending: NoClassDefFoundError (the jar is not on the
// class path) or NoSuchMethodError (NativeLib.java and the tables here disagree).
extern "C" __attribute__((visibility("default"))) jint TvmgenJniRegister(JNIEnv* env) {
  using namespace tvmgen::jni;
  jclass exception = env->FindClass(kExceptionClass);
  if (exception == nullptr) return JNI_ERR;
  g_exception = static_cast<jclass>(env->NewGlobalRef(exception));
  env->DeleteLocalRef(exception);
  jclass cls = env->FindClass(kNativeLibClass);
  if (cls == nullptr) return JNI_ERR;
  std::vector<JNINativeMethod> methods = ModelNatives();
  std::vector<JNINativeMethod> ffi = FfiNatives();
  methods.insert(methods.end(), ffi.begin(), ffi.end());
  jint rc = env->RegisterNatives(cls, methods.data(), static_cast<jint>(methods.size()));
  env->DeleteLocalRef(cls);
  return rc == JNI_OK ? JNI_OK : JNI_ERR;
}

extern "C" __attribute__((visibility("default"))) void TvmgenJniUnregister(JNIEnv* env) {
  using tvmgen::jni::g_exception;
  if (g_exception != nullptr) {
    env->DeleteGlobalRef(g_exception);
    g_exception = nullptr;
  }
}
