// The native methods behind org.tvmgen.Model (declared in NativeLib.java as model*, residentMemory,
// configureThreads, runtimeArch) over tvmgen's C++ runtime (include/tvmgen/runtime.h).
//
// A model is a tvmgen::Model* held in a Java long; Model.java guards against use after close.
// float[] data are pinned (PinnedArray) for the runtime's own copy; direct ByteBuffers are passed
// by address to SetInput / GetOutput / SetState / GetState. Tensor descriptions take a kind: 0 the
// inputs, 1 the outputs, 2 the state tensors of a streaming model.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jni_util.h"
#include "tvmgen/runtime.h"

namespace tvmgen {
namespace jni {
namespace {

tvmgen::Model* ModelOf(jlong handle) {
  if (handle == 0) throw tvmgen::Error("the model is closed");
  return reinterpret_cast<tvmgen::Model*>(static_cast<intptr_t>(handle));
}

const std::vector<tvmgen::TensorInfo>& ListOf(tvmgen::Model* m, jint kind) {
  if (kind < 0 || kind > 2) throw tvmgen::Error("tensor kind " + std::to_string(kind) + " is not 0, 1 or 2");
  return kind == 0 ? m->inputs() : kind == 1 ? m->outputs() : m->states();
}

const tvmgen::TensorInfo& InfoAt(tvmgen::Model* m, jint kind, jint index) {
  const auto& list = ListOf(m, kind);
  if (index < 0 || static_cast<size_t>(index) >= list.size()) {
    const char* what = kind == 0 ? "input" : kind == 1 ? "output" : "state";
    throw tvmgen::Error(std::string(what) + " index " + std::to_string(index) + " is out of range: the model has " +
                        std::to_string(list.size()) + " " + what + (kind == 2 ? " tensors" : "s"));
  }
  return list[index];
}

jlong JNICALL Load(JNIEnv* env, jclass, jstring dir, jint threads, jint affinity) {
  return Guard<jlong>(env, 0, [&] {
    tvmgen::ThreadOptions options;
    options.threads = threads;
    options.affinity = affinity;
    std::unique_ptr<tvmgen::Model> model = tvmgen::Model::Load(ToString(env, dir), options);
    return static_cast<jlong>(reinterpret_cast<intptr_t>(model.release()));
  });
}

// An artifact from memory (org.tvmgen.ArtifactData): the library and the weights each come as a Java array, a
// direct buffer (its whole capacity: Java passes a slice) or, for the library, a path or name. A weights array
// is pinned, not copied, for the load; a library array is copied (into the in-memory file it goes to anyway;
// only one array may be pinned while no JNI call is made). Nothing is kept once Load returns.
jlong JNICALL LoadFromMemory(JNIEnv* env, jclass, jstring name, jbyteArray manifest, jbyteArray library_array,
                             jobject library_buffer, jstring library_path, jbyteArray weights_array,
                             jobject weights_buffer, jobjectArray state_names, jobjectArray state_bytes,
                             jint threads, jint affinity) {
  return Guard<jlong>(env, 0, [&] {
    tvmgen::ArtifactData data;
    data.name = ToString(env, name);
    data.manifest_json = BytesOf(env, manifest);
    data.library_path = ToString(env, library_path);
    const jsize n_state = state_names == nullptr ? 0 : env->GetArrayLength(state_names);
    for (jsize i = 0; i < n_state; ++i) {  // a streaming model's initial state values (small: copied)
      jstring file = static_cast<jstring>(env->GetObjectArrayElement(state_names, i));
      jbyteArray bytes = static_cast<jbyteArray>(env->GetObjectArrayElement(state_bytes, i));
      CheckJava(env);
      data.state_files[ToString(env, file)] = BytesOf(env, bytes);
      env->DeleteLocalRef(file);
      env->DeleteLocalRef(bytes);
    }
    auto direct = [&](jobject buffer, const void** bytes, size_t* size, const char* what) {
      if (buffer == nullptr) return;
      jlong n = env->GetDirectBufferCapacity(buffer);
      *bytes = DirectRange(env, buffer, 0, static_cast<jint>(n), what);
      *size = static_cast<size_t>(n);
    };
    direct(library_buffer, &data.library_bytes, &data.library_size, "the model library's buffer");
    direct(weights_buffer, &data.params_bytes, &data.params_size, "the weights' buffer");
    tvmgen::LoadOptions options;
    options.threads.threads = threads;
    options.threads.affinity = affinity;
    std::string library_copy;
    if (library_array != nullptr) {
      library_copy = BytesOf(env, library_array);
      data.library_bytes = library_copy.data();
      data.library_size = library_copy.size();
    }
    // pinned last: no JNI call may come between pinning and unpinning
    std::unique_ptr<PinnedArray> weights_pin;
    if (weights_array != nullptr) {
      weights_pin.reset(new PinnedArray(env, weights_array, 1, PinnedArray::kRead, "the weights' bytes"));
      data.params_bytes = weights_pin->data();
      data.params_size = weights_pin->nbytes();
    }
    std::unique_ptr<tvmgen::Model> model = tvmgen::Model::Load(data, options);
    return static_cast<jlong>(reinterpret_cast<intptr_t>(model.release()));
  });
}

// {export.library, params.file or null, the initial state files...} of a manifest's text (tvmgen::ReadArtifactFiles).
jobjectArray JNICALL ArtifactFilesOf(JNIEnv* env, jclass, jbyteArray manifest) {
  return Guard<jobjectArray>(env, nullptr, [&]() -> jobjectArray {
    tvmgen::ArtifactFiles files = tvmgen::ReadArtifactFiles(BytesOf(env, manifest));
    jclass string_class = env->FindClass("java/lang/String");
    CheckJava(env);
    jobjectArray out = env->NewObjectArray(static_cast<jsize>(2 + files.state.size()), string_class, nullptr);
    CheckJava(env);
    auto put = [&](jsize i, const std::string& text) {
      jstring s = env->NewStringUTF(text.c_str());
      CheckJava(env);
      env->SetObjectArrayElement(out, i, s);
      env->DeleteLocalRef(s);
    };
    put(0, files.library);
    if (!files.params.empty()) put(1, files.params);
    for (size_t i = 0; i < files.state.size(); ++i) put(static_cast<jsize>(2 + i), files.state[i]);
    return out;
  });
}

void JNICALL Free(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { delete reinterpret_cast<tvmgen::Model*>(static_cast<intptr_t>(handle)); });
}

jstring JNICALL DeviceName(JNIEnv* env, jclass, jlong handle) {
  return Guard<jstring>(env, nullptr, [&] { return env->NewStringUTF(ModelOf(handle)->device().c_str()); });
}

jint JNICALL TensorCount(JNIEnv* env, jclass, jlong handle, jint kind) {
  return Guard<jint>(env, 0, [&] { return static_cast<jint>(ListOf(ModelOf(handle), kind).size()); });
}

jstring JNICALL TensorName(JNIEnv* env, jclass, jlong handle, jint kind, jint index) {
  return Guard<jstring>(env, nullptr,
                        [&] { return env->NewStringUTF(InfoAt(ModelOf(handle), kind, index).name.c_str()); });
}

jstring JNICALL TensorDtype(JNIEnv* env, jclass, jlong handle, jint kind, jint index) {
  return Guard<jstring>(env, nullptr,
                        [&] { return env->NewStringUTF(InfoAt(ModelOf(handle), kind, index).dtype.c_str()); });
}

jlongArray JNICALL TensorShape(JNIEnv* env, jclass, jlong handle, jint kind, jint index) {
  return Guard<jlongArray>(env, nullptr, [&]() -> jlongArray {
    const auto& shape = InfoAt(ModelOf(handle), kind, index).shape;
    jlongArray arr = env->NewLongArray(static_cast<jsize>(shape.size()));
    if (arr == nullptr) return nullptr;  // OutOfMemoryError pending
    std::vector<jlong> dims(shape.begin(), shape.end());
    env->SetLongArrayRegion(arr, 0, static_cast<jsize>(dims.size()), dims.data());
    return arr;
  });
}

jlong JNICALL TensorByteSize(JNIEnv* env, jclass, jlong handle, jint kind, jint index) {
  return Guard<jlong>(env, 0, [&] { return static_cast<jlong>(InfoAt(ModelOf(handle), kind, index).nbytes); });
}

jint JNICALL InputIndex(JNIEnv* env, jclass, jlong handle, jstring name) {
  return Guard<jint>(env, -1, [&] { return static_cast<jint>(ModelOf(handle)->InputIndex(ToString(env, name))); });
}

void JNICALL SetInputFloats(JNIEnv* env, jclass, jlong handle, jint index, jfloatArray data) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    if (data == nullptr) throw tvmgen::Error("input " + std::to_string(index) + ": the array is null");
    PinnedArray pinned(env, data, sizeof(jfloat), PinnedArray::kRead, "the input array");
    m->SetInput(index, pinned.data(), pinned.nbytes());
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

jint JNICALL StateIndex(JNIEnv* env, jclass, jlong handle, jstring name) {
  return Guard<jint>(env, -1, [&] { return static_cast<jint>(ModelOf(handle)->StateIndex(ToString(env, name))); });
}

void JNICALL ResetState(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { ModelOf(handle)->ResetState(); });
}

void JNICALL SetStateBuffer(JNIEnv* env, jclass, jlong handle, jint index, jobject buffer, jint position, jint length) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    char* ptr = DirectRange(env, buffer, position, length, ("state " + std::to_string(index)).c_str());
    m->SetState(index, ptr, static_cast<size_t>(length));
  });
}

void JNICALL GetStateBuffer(JNIEnv* env, jclass, jlong handle, jint index, jobject buffer, jint position, jint length) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    char* ptr = DirectRange(env, buffer, position, length, ("state " + std::to_string(index)).c_str());
    m->GetState(index, ptr, static_cast<size_t>(length));
  });
}

void JNICALL Run(JNIEnv* env, jclass, jlong handle) {
  GuardVoid(env, [&] { ModelOf(handle)->Run(); });
}

jdoubleArray JNICALL Prepare(JNIEnv* env, jclass, jlong handle) {
  return Guard<jdoubleArray>(env, nullptr, [&]() -> jdoubleArray {
    tvmgen::PrepareStats p = ModelOf(handle)->Prepare();
    jdouble values[5] = {static_cast<jdouble>(p.programs), static_cast<jdouble>(p.kernels),
                         static_cast<jdouble>(p.built), static_cast<jdouble>(p.cached), p.ms};
    jdoubleArray arr = env->NewDoubleArray(5);
    if (arr == nullptr) return nullptr;
    env->SetDoubleArrayRegion(arr, 0, 5, values);
    return arr;
  });
}

void JNICALL GetOutputFloats(JNIEnv* env, jclass, jlong handle, jint index, jfloatArray out) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    if (out == nullptr) throw tvmgen::Error("output " + std::to_string(index) + ": the array is null");
    PinnedArray pinned(env, out, sizeof(jfloat), PinnedArray::kReadWrite, "the output array");
    m->GetOutput(index, pinned.data(), pinned.nbytes());
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

// Model::BindInput / BindOutput (`bind`) with a direct buffer's bytes, or unbound when `buffer` is null.
template <typename Bind>
void BindBuffer(JNIEnv* env, jobject buffer, jint position, jint length, const std::string& what, Bind bind) {
  if (buffer == nullptr) {
    bind(nullptr, 0);
    return;
  }
  bind(DirectRange(env, buffer, position, length, what.c_str()), static_cast<size_t>(length));
}

void JNICALL BindOutput(JNIEnv* env, jclass, jlong handle, jint index, jobject buffer, jint position, jint length) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    BindBuffer(env, buffer, position, length, "output " + std::to_string(index),
               [&](char* data, size_t nbytes) { m->BindOutput(index, data, nbytes); });
  });
}

jboolean JNICALL OutputInPlace(JNIEnv* env, jclass, jlong handle, jint index) {
  return Guard<jboolean>(env, JNI_FALSE, [&]() -> jboolean {
    return ModelOf(handle)->OutputWrittenInPlace(index) ? JNI_TRUE : JNI_FALSE;
  });
}

void JNICALL BindInput(JNIEnv* env, jclass, jlong handle, jint index, jobject buffer, jint position, jint length) {
  GuardVoid(env, [&] {
    tvmgen::Model* m = ModelOf(handle);
    BindBuffer(env, buffer, position, length, "input " + std::to_string(index),
               [&](char* data, size_t nbytes) { m->BindInput(index, data, nbytes); });
  });
}

jboolean JNICALL InputInPlace(JNIEnv* env, jclass, jlong handle, jint index) {
  return Guard<jboolean>(env, JNI_FALSE, [&]() -> jboolean {
    return ModelOf(handle)->InputReadInPlace(index) ? JNI_TRUE : JNI_FALSE;
  });
}

jlong JNICALL DirectBufferAddress(JNIEnv* env, jclass, jobject buffer) {
  return Guard<jlong>(env, 0, [&]() -> jlong {
    return static_cast<jlong>(reinterpret_cast<intptr_t>(DirectRange(env, buffer, 0, 0, "the buffer")));
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

}  // namespace

std::vector<JNINativeMethod> ModelNatives() {
  return {
      Native("modelLoad", "(Ljava/lang/String;II)J", Load),
      Native("modelLoadFromMemory",
             "(Ljava/lang/String;[B[BLjava/nio/ByteBuffer;Ljava/lang/String;[BLjava/nio/ByteBuffer;[Ljava/lang/String;"
             "[[BII)J",
             LoadFromMemory),
      Native("artifactFiles", "([B)[Ljava/lang/String;", ArtifactFilesOf),
      Native("modelFree", "(J)V", Free),
      Native("modelDevice", "(J)Ljava/lang/String;", DeviceName),
      Native("modelTensorCount", "(JI)I", TensorCount),
      Native("modelTensorName", "(JII)Ljava/lang/String;", TensorName),
      Native("modelTensorDtype", "(JII)Ljava/lang/String;", TensorDtype),
      Native("modelTensorShape", "(JII)[J", TensorShape),
      Native("modelTensorByteSize", "(JII)J", TensorByteSize),
      Native("modelInputIndex", "(JLjava/lang/String;)I", InputIndex),
      Native("modelSetInputFloats", "(JI[F)V", SetInputFloats),
      Native("modelSetInputBuffer", "(JILjava/nio/ByteBuffer;II)V", SetInputBuffer),
      Native("modelStateIndex", "(JLjava/lang/String;)I", StateIndex),
      Native("modelResetState", "(J)V", ResetState),
      Native("modelSetStateBuffer", "(JILjava/nio/ByteBuffer;II)V", SetStateBuffer),
      Native("modelGetStateBuffer", "(JILjava/nio/ByteBuffer;II)V", GetStateBuffer),
      Native("modelRun", "(J)V", Run),
      Native("modelPrepare", "(J)[D", Prepare),
      Native("modelGetOutputFloats", "(JI[F)V", GetOutputFloats),
      Native("modelGetOutputBuffer", "(JILjava/nio/ByteBuffer;II)V", GetOutputBuffer),
      Native("modelBindOutput", "(JILjava/nio/ByteBuffer;II)V", BindOutput),
      Native("modelOutputInPlace", "(JI)Z", OutputInPlace),
      Native("modelBindInput", "(JILjava/nio/ByteBuffer;II)V", BindInput),
      Native("modelInputInPlace", "(JI)Z", InputInPlace),
      Native("directBufferAddress", "(Ljava/nio/ByteBuffer;)J", DirectBufferAddress),
      Native("modelTimings", "(J)[D", TimingsOf),
      Native("modelProfile", "(JI)Ljava/lang/String;", ProfileOf),
      Native("residentMemory", "()[J", ResidentMemoryOf),
      Native("configureThreads", "(II)V", ConfigureThreads),
      Native("runtimeArch", "()Ljava/lang/String;", RuntimeArch),
  };
}

}  // namespace jni
}  // namespace tvmgen
