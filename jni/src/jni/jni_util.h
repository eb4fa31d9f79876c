// Helpers shared by the two halves of the JNI bridge (libtvmgen_jni_bridge):
//   model_bridge.cc  org.tvmgen.Model's natives over tvmgen's runtime (include/tvmgen/runtime.h)
//   ffi_bridge.cc    org.tvmgen.Module / Function / NDArray's natives straight over tvm-ffi
// Every native method of the Java API is declared in one class, org.tvmgen.NativeLib
// (jni/java/org/tvmgen/NativeLib.java), and registered on it with RegisterNatives by
// TvmgenJniRegister (jni_util.cc), which libtvmgen_jni's JNI_OnLoad (loader.cc) calls.
//
// Conventions:
// - A native method's body runs inside Guard / GuardVoid: any C++ exception becomes a pending
//   org.tvmgen.TvmgenException carrying its message (an ffi::Error's kind first), and a Java
//   exception that is already pending is kept.
// - Java primitive arrays are pinned with PinnedArray (GetPrimitiveArrayCritical, no copy on
//   HotSpot or ART) only for the runtime's own copy: no JNI call may be made while one is pinned,
//   and its destructor unpins it before an exception reaches Guard and becomes a Java exception.
// - Direct ByteBuffers are passed by address (DirectRange): no copy at all.
#ifndef TVMGEN_JNI_JNI_UTIL_H_
#define TVMGEN_JNI_JNI_UTIL_H_

#include <jni.h>
#include <tvm/ffi/error.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "tvmgen/runtime.h"

namespace tvmgen {
namespace jni {

// The class that declares every native method, and the exception class C++ errors become.
constexpr const char* kNativeLibClass = "org/tvmgen/NativeLib";
constexpr const char* kExceptionClass = "org/tvmgen/TvmgenException";

// Throws a TvmgenException with `message`, unless a Java exception is already pending (kept).
void ThrowTvmgen(JNIEnv* env, const std::string& message);

// Runs `body`, turning any C++ exception into a pending TvmgenException; `fallback` is returned then.
template <typename T, typename F>
T Guard(JNIEnv* env, T fallback, F body) {
  try {
    return body();
  } catch (const tvm::ffi::Error& e) {  // what() is the message alone: add the kind (ValueError, ...)
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

// A Java primitive array pinned with GetPrimitiveArrayCritical for this object's lifetime, and
// unpinned by its destructor on every path: a normal return, or an exception on its way to Guard
// (which makes it a Java exception only then, after the release). Between the two no JNI call may
// be made on this thread: the body between them only copies bytes through the runtime.
class PinnedArray {
 public:
  enum Access {
    kRead,       // the native side only reads: released with JNI_ABORT (nothing to copy back)
    kReadWrite,  // the native side writes: released with 0 (copied back if the VM pinned a copy)
  };

  // Pins `array`, whose elements are `element_bytes` bytes each. `what` names it in errors
  // ("the input array"). Throws tvmgen::Error if it is null or cannot be pinned (an
  // OutOfMemoryError is then pending, and kept).
  PinnedArray(JNIEnv* env, jarray array, size_t element_bytes, Access access, const char* what);
  ~PinnedArray();
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  JNIEnv* env_;
  jarray array_;
  jint release_mode_;
  size_t nbytes_ = 0;
  void* data_ = nullptr;
};

// A Java string as UTF-8 (modified UTF-8, as JNI gives it); "" for null.
std::string ToString(JNIEnv* env, jstring s);

// The address of bytes [position, position + length) of a direct buffer, checked against its capacity.
char* DirectRange(JNIEnv* env, jobject buffer, jint position, jint length, const char* what);

// Throws if a Java exception is pending (it is kept: ThrowTvmgen does not replace it).
void CheckJava(JNIEnv* env);

// Array conversions; the New* ones throw on OutOfMemoryError (kept pending).
std::string BytesOf(JNIEnv* env, jbyteArray bytes);
jbyteArray NewBytes(JNIEnv* env, const char* data, size_t size);
jlongArray NewLongs(JNIEnv* env, const int64_t* data, size_t size);
std::vector<int64_t> LongsOf(JNIEnv* env, jlongArray arr);

// A native object owned by a Java long: heap-allocated here, deleted by the class's free method.
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

// One entry of a RegisterNatives table: a NativeLib method's name and JNI signature, and its function.
template <typename F>
JNINativeMethod Native(const char* name, const char* signature, F* fn) {
  return JNINativeMethod{const_cast<char*>(name), const_cast<char*>(signature), reinterpret_cast<void*>(fn)};
}

// The native methods of each half, registered on NativeLib by TvmgenJniRegister.
std::vector<JNINativeMethod> ModelNatives();
std::vector<JNINativeMethod> FfiNatives();

}  // namespace jni
}  // namespace tvmgen

#endif  // TVMGEN_JNI_JNI_UTIL_H_
