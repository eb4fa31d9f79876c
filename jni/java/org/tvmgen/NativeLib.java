package org.tvmgen;

import java.io.File;
import java.nio.ByteBuffer;

/**
 * The JNI library (libtvmgen_jni) and every native method of the Java API, in one place.
 *
 * <p>Package-private: {@link Model}, {@link Module}, {@link Function} and {@link NDArray} call these
 * methods; applications use those classes ({@link Model#loadNativeLibrary()} and
 * {@link Model#loadNativeLibrary(String)} are the public face of {@link #load()} and
 * {@link #load(String)}). The methods are registered with {@code RegisterNatives} when the library
 * loads (jni/src/jni/jni_util.cc, TvmgenJniRegister), so a signature that differs from the C++
 * tables fails then, not at the first call:
 *
 * <ul>
 *   <li>{@code model*}, {@code residentMemory}, {@code configureThreads}, {@code runtimeArch}:
 *       jni/src/jni/model_bridge.cc, over tvmgen's runtime (a model is a {@code tvmgen::Model*})
 *   <li>{@code module*}, {@code function*}, {@code any*}, {@code ndarray*}: jni/src/jni/ffi_bridge.cc,
 *       over tvm-ffi (each handle a heap-allocated {@code ffi::Module}, {@code ffi::Function},
 *       {@code ffi::Tensor}, or {@code ffi::Any} for a call's result)
 * </ul>
 *
 * <p>Every handle is a {@code long}; passing 0 (a closed object) throws a {@link TvmgenException}
 * saying what is closed, though the callers check first ({@link NativeHandle#checkOpen()}). C++
 * errors become {@link TvmgenException}s.
 */
final class NativeLib {
  static final String LIBRARY_PATH_PROPERTY = Model.LIBRARY_PATH_PROPERTY;
  static final String LIBRARY_NAME = Model.LIBRARY_NAME;

  private static volatile boolean loaded;

  private NativeLib() {}

  // ------------------------------------------------------------------ loading

  /**
   * Loads the JNI library, unless it is already loaded: from {@value #LIBRARY_PATH_PROPERTY} when
   * that property is set, else by name through {@code System.loadLibrary("tvmgen_jni")}.
   *
   * @throws UnsatisfiedLinkError if the library (or the TVM runtime it needs) cannot be loaded
   */
  static void load() {
    if (loaded) {
      return;
    }
    synchronized (NativeLib.class) {
      if (loaded) {
        return;
      }
      String path = System.getProperty(LIBRARY_PATH_PROPERTY);
      if (path != null && !path.isEmpty()) {
        load(path);
        return;
      }
      try {
        System.loadLibrary(LIBRARY_NAME);
      } catch (UnsatisfiedLinkError e) {
        UnsatisfiedLinkError wrapped = new UnsatisfiedLinkError("cannot load the tvmgen JNI library ("
            + System.mapLibraryName(LIBRARY_NAME) + "): " + e.getMessage() + ". Put its directory on "
            + "-Djava.library.path, set -D" + LIBRARY_PATH_PROPERTY + "=<file or directory>, or call "
            + "Model.loadNativeLibrary(path)");
        wrapped.initCause(e);
        throw wrapped;
      }
      loaded = true;
    }
  }

  /**
   * Loads the JNI library from an explicit location, unless it is already loaded.
   *
   * @param path the library file (libtvmgen_jni.so), or the directory that holds it
   * @throws UnsatisfiedLinkError if it cannot be loaded
   */
  static void load(String path) {
    synchronized (NativeLib.class) {
      if (loaded) {
        return;
      }
      File file = new File(path);
      if (file.isDirectory()) {
        file = new File(file, System.mapLibraryName(LIBRARY_NAME));
      }
      if (!file.isFile()) {
        throw new UnsatisfiedLinkError("the tvmgen JNI library " + file + " does not exist");
      }
      System.load(file.getAbsolutePath());
      loaded = true;
    }
  }

  // ------------------------------------------------------------------ Model (model_bridge.cc)

  static native long modelLoad(String dir, int threads, int affinity);

  /**
   * An artifact from memory (ArtifactData): library and weights each as an array, a direct buffer or null; the
   * initial state files' names and bytes (empty arrays for none).
   */
  static native long modelLoadFromMemory(String name, byte[] manifest, byte[] libraryArray, ByteBuffer libraryBuffer,
      String libraryPath, byte[] weightsArray, ByteBuffer weightsBuffer, String[] stateFiles, byte[][] stateBytes,
      int threads, int affinity);

  /** {export.library, params.file or null, then each initial state file} of a manifest.json's bytes. */
  static native String[] artifactFiles(byte[] manifest);

  static native void modelFree(long model);

  static native String modelDevice(long model);

  /** Tensor kinds of the modelTensor* methods. */
  static final int INPUTS = 0;
  static final int OUTPUTS = 1;
  static final int STATES = 2;

  static native int modelTensorCount(long model, int kind);

  static native String modelTensorName(long model, int kind, int index);

  static native String modelTensorDtype(long model, int kind, int index);

  static native long[] modelTensorShape(long model, int kind, int index);

  static native long modelTensorByteSize(long model, int kind, int index);

  static native int modelInputIndex(long model, String name);

  static native void modelSetInputFloats(long model, int index, float[] data);

  static native void modelSetInputBuffer(long model, int index, ByteBuffer data, int position, int length);

  static native int modelStateIndex(long model, String name);

  static native void modelResetState(long model);

  static native void modelSetStateBuffer(long model, int index, ByteBuffer data, int position, int length);

  static native void modelGetStateBuffer(long model, int index, ByteBuffer out, int position, int length);

  static native void modelRun(long model);

  /** Model::Prepare: {programs, kernels, built, cached, ms}. */
  static native double[] modelPrepare(long model);

  static native void modelGetOutputFloats(long model, int index, float[] out);

  static native void modelGetOutputBuffer(long model, int index, ByteBuffer out, int position, int length);

  /** {@code out} null: unbound. */
  static native void modelBindOutput(long model, int index, ByteBuffer out, int position, int length);

  static native boolean modelOutputInPlace(long model, int index);

  /** {@code in} null: unbound. */
  static native void modelBindInput(long model, int index, ByteBuffer in, int position, int length);

  static native boolean modelInputInPlace(long model, int index);

  /** The address of a direct buffer's first byte. */
  static native long directBufferAddress(ByteBuffer buffer);

  /** {load, init, first run, copy in, run, copy out} in ms, then the run count. */
  static native double[] modelTimings(long model);

  /** The runtime's profile JSON (see {@link Profile}). */
  static native String modelProfile(long model, int runs);

  /** {VmRSS, VmHWM} in bytes, from the runtime's ReadResidentMemory (zeros without /proc/self/status). */
  static native long[] residentMemory();

  static native void configureThreads(int threads, int affinity);

  static native String runtimeArch();

  // ------------------------------------------------------------------ Module (ffi_bridge.cc)

  static native long moduleLoad(String path);

  static native void moduleFree(long module);

  /** The function's handle, or 0 if the module has none of that name. */
  static native long moduleGetFunction(long module, String name, boolean queryImports);

  static native String moduleKind(long module);

  // ------------------------------------------------------------------ Function and its results (ffi_bridge.cc)

  /** The global function's handle, or 0 if none of that name is registered. */
  static native long functionGetGlobal(String name);

  static native void functionFree(long function);

  /**
   * Calls a function; {@code kinds[i]} (Function's KIND_*) says how argument i travels: an
   * int/bool/handle in {@code longs[i]}, a float in {@code doubles[i]}, a string (UTF-8 bytes) or a
   * shape (long[]) in {@code objects[i]}.
   *
   * @return the result's handle (an {@code ffi::Any}), freed with {@link #anyFree(long)}
   */
  static native long functionCall(long function, int[] kinds, long[] longs, double[] doubles, Object[] objects);

  static native void anyFree(long any);

  static native int anyKind(long any);

  static native String anyTypeKey(long any);

  static native long anyLong(long any);

  static native double anyDouble(long any);

  static native byte[] anyString(long any);

  static native long[] anyShape(long any);

  /** A new handle of the result's own kind (tensor, module or function). */
  static native long anyObject(long any);

  static native int anyArraySize(long any);

  static native long anyArrayItem(long any, int index);

  // ------------------------------------------------------------------ NDArray (ffi_bridge.cc)

  static native long ndarrayEmpty(long[] shape, String dtype, int deviceType, int deviceId, String deviceName);

  static native void ndarrayFree(long tensor);

  static native long[] ndarrayShape(long tensor);

  static native String ndarrayDtype(long tensor);

  /** The device as {@code type << 32 | id}. */
  static native long ndarrayDevice(long tensor);

  static native long ndarrayByteSize(long tensor);

  static native void ndarrayCopyFromArray(long tensor, Object array, int elementBytes);

  static native void ndarrayCopyToArray(long tensor, Object array, int elementBytes);

  static native void ndarrayCopyFromBuffer(long tensor, ByteBuffer data, int position, int length);

  static native void ndarrayCopyToBuffer(long tensor, ByteBuffer out, int position, int length);
}
