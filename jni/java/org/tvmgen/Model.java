package org.tvmgen;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;

/**
 * A model artifact loaded by the tvmgen native runtime: the directory {@code tvmgen compile}
 * writes (manifest.json, the model library, optional model.params), ready to run on the device
 * it was compiled for.
 *
 * <p>This is the high-level API: the artifact's Relax VM and its entry function, behind the one
 * call sequence it supports. The low-level tvm4j-style classes {@link Module}, {@link Function}
 * and {@link NDArray} expose the same TVM runtime objects directly, for anything else:
 *
 * <pre>{@code
 * try (Model model = Model.load("/data/local/tmp/mobilenet")) {
 *   model.setInput("input", pixels);          // float[] or a direct ByteBuffer
 *   model.run();
 *   float[] probs = model.getOutputFloats(0);
 *   System.out.println(model.timings().toJson());
 *   System.out.println(model.profile(20));     // the slowest kernels, see Profile
 *   System.out.println(model.memory());        // peak resident memory after load and overall
 * }
 * }</pre>
 *
 * <p>An artifact can also come from memory instead of a directory ({@link #load(ArtifactData)}): weights the
 * app decrypted or downloaded, an Android app's assets, nothing written to a file.
 *
 * <p>Data cross into and out of the model as host bytes: {@code float[]} arrays (copied straight
 * from the array's memory, no intermediate Java copy) or direct {@link ByteBuffer}s (passed by
 * address, no copy at all). Inputs keep their values between runs until set again.
 *
 * <p>The native library is loaded on first use: from the file or directory named by the system
 * property {@value #LIBRARY_PATH_PROPERTY} when it is set, else with
 * {@code System.loadLibrary("tvmgen_jni")} (java.library.path, or an Android app's native
 * libraries); or call {@link #loadNativeLibrary(String)} first. Loading it leaves the JVM's own
 * signal handlers in place (the TVM runtime library installs a SIGSEGV crash handler when loaded,
 * which would otherwise replace the one the JVM needs).
 *
 * <p>A model holds native memory until {@link #close()}: use try-with-resources. Methods are
 * synchronized, so one model may be shared between threads, though its runs happen one at a time.
 * After {@code close()} every method throws {@link IllegalStateException}.
 *
 * <p>Threads: each call is atomic, a sequence of calls is not: another thread may set an input between
 * your {@code setInput} and {@code run}, or run again before your {@code getOutput}. Keep a model to one
 * thread, or hold its lock ({@code synchronized (model) {...}}) around a whole sequence, or use
 * {@link #runAsyncAndRead(java.util.function.Function)}, which runs and reads the outputs under the lock. The
 * asynchronous runs ({@link #runAsync()}) go to one thread the model owns, one at a time and in the order
 * they were called, so an app's UI thread never waits for a run; {@code close()} waits for the run in
 * progress and stops that thread, and runs still queued then fail with {@link IllegalStateException}.
 *
 * <p>Streaming models (keyword spotters, RNN decoders) carry state from run to run, held on the model's device
 * ({@link #states()}, not among the inputs and outputs): each {@link #run()} reads it and leaves the next one,
 * with no copy through the app. Runs are steps of one stream, in the stream's order: make them from one thread,
 * or through {@link #runAsync()} / {@link #runAsyncAndRead(java.util.function.Function)}, which keep the order of
 * the calls ({@link #runAsync(Executor)} keeps the executor's). {@link #resetState()} starts a new stream;
 * {@link #getState(String)}, {@link #setState(String, Tensor)}, {@link #saveState()} and
 * {@link #restoreState(SavedState)} read and write it between runs.
 */
public final class Model extends NativeHandle {
  /** Thread affinity: no preference (TVM's default). */
  public static final int AFFINITY_ANY = 0;
  /** Thread affinity: big (fast) cores. */
  public static final int AFFINITY_BIG = 1;
  /** Thread affinity: little (efficient) cores. */
  public static final int AFFINITY_LITTLE = -1;
  /** The system property naming the JNI library file, or the directory that holds it. */
  public static final String LIBRARY_PATH_PROPERTY = "tvmgen.library.path";
  /** The JNI library's name for {@link System#loadLibrary(String)}: libtvmgen_jni.so. */
  public static final String LIBRARY_NAME = "tvmgen_jni";

  private final String directory;
  private final String deviceName;
  private final List<TensorInfo> inputs;
  private final List<TensorInfo> outputs;
  private final List<TensorInfo> states;
  private final long beforeLoadBytes;
  private final long afterLoadPeakBytes;

  private Model(long handle, String directory, long beforeLoadBytes, long afterLoadPeakBytes) {
    super(handle);
    this.directory = directory;
    this.beforeLoadBytes = beforeLoadBytes;
    this.afterLoadPeakBytes = afterLoadPeakBytes;
    this.deviceName = NativeLib.modelDevice(handle);
    this.inputs = tensorInfos(handle, NativeLib.INPUTS);
    this.outputs = tensorInfos(handle, NativeLib.OUTPUTS);
    this.bound = new Tensor[outputs.size()];
    this.boundInputs = new Tensor[inputs.size()];
    this.states = tensorInfos(handle, NativeLib.STATES);
  }

  // ------------------------------------------------------------------ native library

  /**
   * Loads the JNI library, unless it is already loaded: from {@value #LIBRARY_PATH_PROPERTY} when
   * that property is set, else by name through {@code System.loadLibrary("tvmgen_jni")}.
   * {@link #load(String)} calls this itself.
   *
   * @throws UnsatisfiedLinkError if the library (or the TVM runtime it needs) cannot be loaded
   */
  public static void loadNativeLibrary() {
    NativeLib.load();
  }

  /**
   * Loads the JNI library from an explicit location, unless a JNI library is already loaded.
   * libtvmgen_jni then loads libtvmgen_jni_bridge from its own directory (else from the system's
   * library path), and that finds the tvmgen and TVM runtime libraries through its RPATH (the build
   * tree, or the directory it is installed in) or the system's library path.
   *
   * @param path the library file (libtvmgen_jni.so), or the directory that holds it
   * @throws UnsatisfiedLinkError if it cannot be loaded
   */
  public static void loadNativeLibrary(String path) {
    NativeLib.load(path);
  }

  /**
   * The CPU architecture the native runtime was built for; artifacts must be compiled for it.
   *
   * @return x86_64, aarch64 or arm
   */
  public static String runtimeArch() {
    loadNativeLibrary();
    return NativeLib.runtimeArch();
  }

  /**
   * Reconfigures TVM's CPU thread pool for every model in this process that uses it (loaded with a
   * big or little affinity, or compiled by a tvmgen without its own parallel launcher; see
   * {@link #load(String, int, int)}).
   *
   * @param threads the number of threads; 0 for TVM's default (one per core)
   * @param affinity {@link #AFFINITY_BIG}, {@link #AFFINITY_LITTLE} or {@link #AFFINITY_ANY}
   * @throws TvmgenException if the values are out of range
   */
  public static void configureThreads(int threads, int affinity) {
    loadNativeLibrary();
    NativeLib.configureThreads(threads, affinity);
  }

  // ------------------------------------------------------------------ loading

  /**
   * Loads an artifact directory with the default CPU threading (see {@link #load(String, int, int)}).
   *
   * @param dir the directory {@code tvmgen compile} wrote
   * @return the loaded model; close it when done
   * @throws TvmgenException if the artifact cannot be loaded (missing files, another platform's
   *     library, a device this runtime lacks, ...)
   */
  public static Model load(String dir) {
    return load(dir, 0, AFFINITY_ANY);
  }

  /**
   * Loads an artifact directory and sets its CPU threads.
   *
   * <p>With {@link #AFFINITY_ANY} the model's parallel loops run on the launcher tvmgen links into the
   * model library: threads take chunks of each loop, so a thread another app holds up does not stall
   * a kernel. A big or little affinity uses TVM's thread pool instead, which pins its threads.
   *
   * @param dir the directory {@code tvmgen compile} wrote
   * @param threads CPU threads; 0 for {@code TVM_NUM_THREADS}, else one per physical big core
   * @param affinity {@link #AFFINITY_BIG}, {@link #AFFINITY_LITTLE} or {@link #AFFINITY_ANY}
   * @return the loaded model; close it when done
   * @throws TvmgenException if the artifact cannot be loaded or the thread settings are invalid
   */
  public static Model load(String dir, int threads, int affinity) {
    if (dir == null) {
      throw new NullPointerException("dir");
    }
    loadNativeLibrary();
    long[] before = NativeLib.residentMemory();  // as tvmgen-run: VmRSS before, VmHWM after (load + VM init)
    long h = NativeLib.modelLoad(dir, threads, affinity);
    return wrap(h, dir, before);
  }

  /**
   * Loads an artifact held in memory (see {@link ArtifactData}) with the default CPU threading.
   *
   * @param data the manifest, library and weights
   * @return the loaded model; close it when done
   * @throws TvmgenException if the artifact cannot be loaded (its library or weights missing, another
   *     platform's library, ...)
   */
  public static Model load(ArtifactData data) {
    return load(data, 0, AFFINITY_ANY);
  }

  /**
   * Loads an artifact held in memory and sets its CPU threads (see {@link #load(String, int, int)}). No file
   * is read or written; the runtime keeps no reference to {@code data}'s bytes once this returns.
   *
   * @param data the manifest, library and weights
   * @param threads CPU threads; 0 for {@code TVM_NUM_THREADS}, else one per physical big core
   * @param affinity {@link #AFFINITY_BIG}, {@link #AFFINITY_LITTLE} or {@link #AFFINITY_ANY}
   * @return the loaded model, whose {@link #directory()} is the artifact's {@link ArtifactData#name()}
   * @throws TvmgenException if the artifact cannot be loaded or the thread settings are invalid
   */
  public static Model load(ArtifactData data, int threads, int affinity) {
    if (data == null) {
      throw new NullPointerException("data");
    }
    loadNativeLibrary();
    long[] before = NativeLib.residentMemory();
    long h = data.load(threads, affinity);
    return wrap(h, data.name(), before);
  }

  private static Model wrap(long h, String name, long[] before) {
    long[] after = NativeLib.residentMemory();
    try {
      return new Model(h, name, before[0], after[1]);
    } catch (RuntimeException | Error e) {
      NativeLib.modelFree(h);
      throw e;
    }
  }

  private static List<TensorInfo> tensorInfos(long h, int kind) {
    int n = NativeLib.modelTensorCount(h, kind);
    List<TensorInfo> list = new ArrayList<TensorInfo>(n);
    for (int i = 0; i < n; ++i) {
      list.add(new TensorInfo(NativeLib.modelTensorName(h, kind, i), NativeLib.modelTensorShape(h, kind, i),
          NativeLib.modelTensorDtype(h, kind, i), NativeLib.modelTensorByteSize(h, kind, i)));
    }
    return Collections.unmodifiableList(list);
  }

  // ------------------------------------------------------------------ description

  /**
   * The directory the model was loaded from.
   *
   * @return the path given to {@link #load(String)}, or the {@link ArtifactData#name()} of an artifact from memory
   */
  public String directory() {
    return directory;
  }

  /**
   * The model's inputs, in the order the entry function takes them (a streaming model's state inputs
   * excepted: see {@link #states()}).
   *
   * @return an unmodifiable list
   * @throws IllegalStateException if the model is closed
   */
  public synchronized List<TensorInfo> inputs() {
    checkOpen();
    return inputs;
  }

  /**
   * The model's outputs, in the order the entry function returns them (a streaming model's next state
   * excepted).
   *
   * @return an unmodifiable list
   * @throws IllegalStateException if the model is closed
   */
  public synchronized List<TensorInfo> outputs() {
    checkOpen();
    return outputs;
  }

  /**
   * The device the model runs on, from its manifest.
   *
   * @return CPU, CUDA, OPENCL, VULKAN or METAL
   * @throws IllegalStateException if the model is closed
   */
  public synchronized Device device() {
    checkOpen();
    return Device.fromName(deviceName);
  }

  /**
   * The index of the input with the given name.
   *
   * @param name an input name from the manifest
   * @return its index in {@link #inputs()}
   * @throws TvmgenException naming the model's inputs if there is no such input, or pointing to
   *     {@link #setState(String, Tensor)} if it is a state input
   * @throws IllegalStateException if the model is closed
   */
  public synchronized int inputIndex(String name) {
    long h = checkOpen();
    if (name == null) {
      throw new NullPointerException("name");
    }
    return NativeLib.modelInputIndex(h, name);
  }

  /**
   * The index of the output with the given name.
   *
   * @param name an output name from the manifest
   * @return its index in {@link #outputs()}
   * @throws TvmgenException naming the model's outputs if there is no such output
   * @throws IllegalStateException if the model is closed
   */
  public synchronized int outputIndex(String name) {
    checkOpen();
    StringBuilder names = new StringBuilder();
    for (int i = 0; i < outputs.size(); ++i) {
      if (outputs.get(i).name().equals(name)) {
        return i;
      }
      names.append(i == 0 ? "" : ", ").append(outputs.get(i).name());
    }
    throw new TvmgenException("unknown output name \"" + name + "\"; this model's outputs are: " + names);
  }

  /**
   * A zero-filled direct buffer for input {@code index}, sized and ordered for it, starting at a
   * 64-byte boundary as the model's own buffers do (so that {@link #bindInput(int, Tensor)} can
   * have the kernels read it in place).
   *
   * @param index the input's index
   * @return a new tensor
   * @throws IndexOutOfBoundsException if there is no such input
   */
  public Tensor allocateInput(int index) {
    return aligned(inputs().get(index));
  }

  /**
   * A zero-filled direct buffer for the named input.
   *
   * @param name the input's name
   * @return a new tensor
   * @throws TvmgenException if there is no such input
   */
  public Tensor allocateInput(String name) {
    return allocateInput(inputIndex(name));
  }

  /**
   * A direct buffer for output {@code index}, to pass to {@link #bindOutput(int, Tensor)} or
   * {@link #getOutput(int, Tensor)}. Its memory starts at a 64-byte boundary, as the model's own
   * buffers do, so that the kernels can write the output into it in place.
   *
   * @param index the output's index
   * @return a new tensor
   * @throws IndexOutOfBoundsException if there is no such output
   */
  public Tensor allocateOutput(int index) {
    return aligned(outputs().get(index));
  }

  /** A zero-filled tensor for {@code info} whose memory starts at an {@link #ALIGNMENT} boundary. */
  private static Tensor aligned(TensorInfo info) {
    if (info.byteSize() > Integer.MAX_VALUE - ALIGNMENT) {
      return Tensor.allocate(info);  // (throws: more than a ByteBuffer holds)
    }
    int n = (int) info.byteSize();
    ByteBuffer whole = ByteBuffer.allocateDirect(n + ALIGNMENT - 1);
    int skip = (int) ((ALIGNMENT - NativeLib.directBufferAddress(whole) % ALIGNMENT) % ALIGNMENT);
    whole.position(skip);
    whole.limit(skip + n);
    return Tensor.wrap(info, whole.slice().order(ByteOrder.nativeOrder()));
  }

  /** The alignment of the runtime's buffers, which its kernels assume. */
  private static final int ALIGNMENT = 64;

  // ------------------------------------------------------------------ inputs

  /**
   * Copies float values into a float32 input.
   *
   * @param index the input's index
   * @param data exactly the input's element count of values (its byte size / 4)
   * @throws TvmgenException if the index is out of range, the input is not float32, or the
   *     array's size differs from the input's ("takes N bytes, M were given")
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setInput(int index, float[] data) {
    long h = checkOpen();
    if (data == null) {
      throw new NullPointerException("data");
    }
    requireFloat32(inputs, index, "input");
    NativeLib.modelSetInputFloats(h, index, data);
  }

  /**
   * Copies float values into the named float32 input.
   *
   * @param name the input's name
   * @param data exactly the input's element count of values
   * @throws TvmgenException if there is no such input (the message lists the inputs), it is not
   *     float32, or the array's size is wrong
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setInput(String name, float[] data) {
    setInput(inputIndex(name), data);
  }

  /**
   * Copies an input's bytes straight from a direct buffer's memory (no Java-side copy).
   *
   * <p>The bytes between the buffer's position and limit are used, and must be exactly the input's
   * {@link TensorInfo#byteSize()}; the position is not changed, so the same buffer can be set again
   * for the next run. Elements must be in native byte order, and the buffer's {@code order()} must
   * say so when elements are wider than one byte:
   * {@code ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder())}.
   *
   * @param index the input's index
   * @param data a direct buffer, any element type
   * @throws IllegalArgumentException if the buffer is not direct or not in native byte order
   * @throws TvmgenException if the index is out of range or the size is wrong
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setInput(int index, ByteBuffer data) {
    long h = checkOpen();
    checkBuffer(data, inputs, index, "input");
    NativeLib.modelSetInputBuffer(h, index, data, data.position(), data.remaining());
  }

  /**
   * Copies the named input's bytes straight from a direct buffer; see
   * {@link #setInput(int, ByteBuffer)}.
   *
   * @param name the input's name
   * @param data a direct, native-order buffer holding exactly the input's bytes between position
   *     and limit
   * @throws IllegalArgumentException if the buffer is not direct or not in native byte order
   * @throws TvmgenException if there is no such input or the size is wrong
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setInput(String name, ByteBuffer data) {
    setInput(inputIndex(name), data);
  }

  /**
   * Copies an input from a {@link Tensor} (its first {@code byteSize()} bytes, no Java-side copy).
   *
   * @param index the input's index
   * @param tensor a tensor of the input's size, e.g. from {@link #allocateInput(int)}
   * @throws TvmgenException if the index is out of range or the size is wrong
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setInput(int index, Tensor tensor) {
    long h = checkOpen();
    NativeLib.modelSetInputBuffer(h, index, tensor.buffer(), 0, checkedSize(tensor));
  }

  /**
   * Copies the named input from a {@link Tensor}.
   *
   * @param name the input's name
   * @param tensor a tensor of the input's size
   * @throws TvmgenException if there is no such input or the size is wrong
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setInput(String name, Tensor tensor) {
    setInput(inputIndex(name), tensor);
  }

  // ------------------------------------------------------------------ running

  /**
   * Builds the model's GPU kernels now, or loads them from the kernel cache, so that the first
   * {@link #run()} compiles nothing. Loading a model starts these builds in the background already;
   * this waits for them. Call it behind a splash screen (off the UI thread: a cold start compiles for
   * up to seconds), or once after install to fill the kernel cache. Nothing to do on the CPU; calling
   * it again costs nothing.
   *
   * @return what was built and what came from the cache
   * @throws TvmgenException if a kernel fails to build (the driver's log is in the message)
   * @throws IllegalStateException if the model is closed
   */
  public synchronized PrepareStats prepare() {
    double[] p = NativeLib.modelPrepare(checkOpen());
    return new PrepareStats((int) p[0], (int) p[1], (int) p[2], (int) p[3], p[4]);
  }

  /**
   * Runs the model on the inputs set so far (each input must have been set at least once).
   *
   * @throws TvmgenException if an input was never set or the run fails
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void run() {
    NativeLib.modelRun(checkOpen());
  }

  /**
   * Runs the model on the thread this model owns (made on first use, stopped by {@link #close()}) and
   * returns at once; the future completes with this model when the run is done, or exceptionally
   * with the run's {@link TvmgenException}. Runs queue one after another.
   *
   * <pre>{@code
   * model.setInput("input", pixels);
   * model.runAsync().thenAccept(m -> show(m.getOutputFloats(0)));   // not on the UI thread
   * }</pre>
   *
   * @return the run's future
   * @throws IllegalStateException if the model is closed
   */
  public CompletableFuture<Model> runAsync() {
    return runAsync(runThread());
  }

  /**
   * Runs the model on {@code executor}; see {@link #runAsync()}.
   *
   * @param executor where the run happens (e.g. an app's own background executor)
   * @return the run's future
   * @throws IllegalStateException if the model is closed
   */
  public CompletableFuture<Model> runAsync(Executor executor) {
    checkOpen();
    return CompletableFuture.supplyAsync(() -> {
      run();
      return this;
    }, executor);
  }

  /**
   * Runs the model on its own thread and hands the result to {@code read} under the model's lock, so
   * no other thread's input or run can come between the run and the outputs {@code read} copies.
   *
   * <pre>{@code
   * CompletableFuture<float[]> probs = model.runAsyncAndRead(m -> m.getOutputFloats(0));
   * }</pre>
   *
   * @param read what to take from the model after the run (runs on the model's thread)
   * @param <T> what {@code read} returns
   * @return the future of {@code read}'s result
   * @throws IllegalStateException if the model is closed
   */
  public <T> CompletableFuture<T> runAsyncAndRead(java.util.function.Function<Model, T> read) {
    checkOpen();
    return CompletableFuture.supplyAsync(() -> {
      synchronized (this) {
        run();
        return read.apply(this);
      }
    }, runThread());
  }

  private ExecutorService runExecutor;  // runAsync's thread, made on first use
  private Tensor[] bound;  // bindOutput's tensors, kept from the garbage collector while the runtime writes them
  private Tensor[] boundInputs;  // bindInput's tensors, likewise

  private synchronized Executor runThread() {
    checkOpen();
    if (runExecutor == null) {
      final String name = "tvmgen-run-" + new java.io.File(directory).getName();
      runExecutor = Executors.newSingleThreadExecutor(new ThreadFactory() {
        @Override
        public Thread newThread(Runnable r) {
          Thread t = new Thread(r, name);
          t.setDaemon(true);  // a model left open does not keep the JVM alive
          return t;
        }
      });
    }
    return runExecutor;
  }

  /** Frees the model, after the run in progress (if any); stops the thread of {@link #runAsync()}. */
  @Override
  public void close() {
    ExecutorService thread;
    synchronized (this) {
      super.close();
      thread = runExecutor;
      runExecutor = null;
    }
    if (thread != null) {
      thread.shutdown();  // runs still queued find the model closed and fail with IllegalStateException
    }
  }

  // ------------------------------------------------------------------ outputs

  /**
   * Copies a float32 output of the latest run into an array.
   *
   * @param index the output's index
   * @param out exactly the output's element count of floats
   * @throws TvmgenException if there was no run yet, the index is out of range, the output is not
   *     float32, or the array's size differs from the output's
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void getOutput(int index, float[] out) {
    long h = checkOpen();
    if (out == null) {
      throw new NullPointerException("out");
    }
    requireFloat32(outputs, index, "output");
    NativeLib.modelGetOutputFloats(h, index, out);
  }

  /**
   * Copies an output of the latest run straight into a direct buffer's memory (no Java-side copy).
   *
   * <p>The output's {@link TensorInfo#byteSize()} bytes are written from the buffer's position,
   * in native byte order; the buffer must have at least that many bytes remaining and, for
   * elements wider than a byte, native {@code order()}. Its position is not changed.
   *
   * @param index the output's index
   * @param out a direct, writable, native-order buffer
   * @throws IllegalArgumentException if the buffer is not direct, read-only or not in native order
   * @throws TvmgenException if there was no run yet, the index is out of range or the buffer is too
   *     small
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void getOutput(int index, ByteBuffer out) {
    long h = checkOpen();
    checkBuffer(out, outputs, index, "output");
    if (out.isReadOnly()) {
      throw new IllegalArgumentException("output " + index + ": the buffer is read-only");
    }
    int n = out.remaining();
    if (index >= 0 && index < outputs.size() && outputs.get(index).byteSize() <= n) {
      n = (int) outputs.get(index).byteSize();
    }
    NativeLib.modelGetOutputBuffer(h, index, out, out.position(), n);
  }

  /**
   * Every later {@link #run()} leaves output {@code index} in {@code tensor}, as an app that keeps
   * its output buffers wants: read it there after each run, with no {@code getOutput} call. Where
   * the model runs on the CPU as direct calls ({@link #executor()} "direct calls") without state,
   * the tensor comes from {@link #allocateOutput(int)} (64-byte aligned) and a kernel writes the
   * output as a buffer of the run's own, that kernel writes it into the tensor, with no copy, from
   * the second run on; otherwise each run copies it there. {@link #outputWrittenInPlace(int)} says
   * which the latest run did. The model keeps the tensor until another is bound.
   *
   * @param index the output's index
   * @param tensor a tensor of the output's size, or null: no longer bound
   * @throws IllegalArgumentException if the tensor's buffer is read-only
   * @throws TvmgenException if the index is out of range or the size differs
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void bindOutput(int index, Tensor tensor) {
    long h = checkOpen();
    if (tensor == null) {
      NativeLib.modelBindOutput(h, index, null, 0, 0);
    } else {
      if (tensor.buffer().isReadOnly()) {
        throw new IllegalArgumentException("output " + index + ": the tensor's buffer is read-only");
      }
      NativeLib.modelBindOutput(h, index, tensor.buffer(), 0, checkedSize(tensor));
    }
    if (index >= 0 && index < bound.length) {
      bound[index] = tensor;  // its memory is the native runtime's target from now on
    }
  }

  /**
   * Every later {@link #run()} reads input {@code index} from {@code tensor}: write each frame into
   * it, with no {@code setInput} call. Where the model runs on the CPU as direct calls without state,
   * the tensor comes from {@link #allocateInput(int)} (64-byte aligned) and no builtin of the model
   * keeps a view of that input, the kernels read it in place from the second run on; otherwise each
   * run copies it in first. {@code setInput} on a bound input copies into the tensor. The model keeps
   * the tensor until another is bound.
   *
   * @param index the input's index
   * @param tensor a tensor of the input's size, or null: no longer bound (the input keeps its bytes)
   * @throws TvmgenException if the index is out of range or the size differs
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void bindInput(int index, Tensor tensor) {
    long h = checkOpen();
    if (tensor == null) {
      NativeLib.modelBindInput(h, index, null, 0, 0);
    } else {
      NativeLib.modelBindInput(h, index, tensor.buffer(), 0, checkedSize(tensor));
    }
    if (index >= 0 && index < boundInputs.length) {
      boundInputs[index] = tensor;  // its memory is read by the native runtime from now on
    }
  }

  /**
   * Whether the latest run's kernels read input {@code index} straight from the tensor bound to it.
   *
   * @param index the input's index
   * @return true when read in place, false when copied or not bound
   * @throws IllegalStateException if the model is closed
   */
  public synchronized boolean inputReadInPlace(int index) {
    return NativeLib.modelInputInPlace(checkOpen(), index);
  }

  /**
   * Whether the latest run's kernels wrote output {@code index} straight into the tensor bound to it.
   *
   * @param index the output's index
   * @return true when written in place, false when copied or not bound
   * @throws TvmgenException if the index is out of range
   * @throws IllegalStateException if the model is closed
   */
  public synchronized boolean outputWrittenInPlace(int index) {
    return NativeLib.modelOutputInPlace(checkOpen(), index);
  }

  /**
   * Copies an output of the latest run into a {@link Tensor} (no Java-side copy); nothing to copy
   * when it is the tensor bound to the output ({@link #bindOutput(int, Tensor)}).
   *
   * @param index the output's index
   * @param tensor a tensor of the output's size, e.g. from {@link #allocateOutput(int)}
   * @throws TvmgenException if there was no run yet, the index is out of range or the size differs
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void getOutput(int index, Tensor tensor) {
    long h = checkOpen();
    if (tensor.buffer().isReadOnly()) {
      throw new IllegalArgumentException("output " + index + ": the tensor's buffer is read-only");
    }
    NativeLib.modelGetOutputBuffer(h, index, tensor.buffer(), 0, checkedSize(tensor));
  }

  /**
   * Copies a float32 output of the latest run into a new array.
   *
   * @param index the output's index
   * @return the output's values, flattened in row-major order
   * @throws TvmgenException if there was no run yet, the index is out of range, or the output is
   *     not float32
   * @throws IllegalStateException if the model is closed
   */
  public synchronized float[] getOutputFloats(int index) {
    checkOpen();
    requireFloat32(outputs, index, "output");
    if (index < 0 || index >= outputs.size()) {
      throw new TvmgenException("output index " + index + " is out of range: the model has " + outputs.size()
          + " outputs");
    }
    float[] out = new float[(int) outputs.get(index).elementCount()];
    getOutput(index, out);
    return out;
  }

  // ------------------------------------------------------------------ state (streaming models)

  /**
   * A streaming model's state tensors, each named after the input the runtime feeds it to.
   *
   * @return an unmodifiable list; empty for a model without state
   * @throws IllegalStateException if the model is closed
   */
  public synchronized List<TensorInfo> states() {
    checkOpen();
    return states;
  }

  /**
   * The number of state tensors: {@code states().size()}.
   *
   * @return 0 for a model without state
   */
  public synchronized int stateCount() {
    checkOpen();
    return states.size();
  }

  /**
   * Every state back to its initial value (the artifact's, else zeros): the start of a new stream.
   *
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void resetState() {
    NativeLib.modelResetState(checkOpen());
  }

  /**
   * Copies a state's value held now (after the latest run) into a new tensor.
   *
   * @param name the state's name (its input's)
   * @return a tensor of {@code states()}' description for it
   * @throws TvmgenException naming the model's states if there is no such state
   * @throws IllegalStateException if the model is closed
   */
  public synchronized Tensor getState(String name) {
    int index = stateIndex(name);
    Tensor t = Tensor.allocate(states.get(index));
    NativeLib.modelGetStateBuffer(checkOpen(), index, t.buffer(), 0, checkedSize(t));
    return t;
  }

  /**
   * Copies a float32 state's value held now into a new array.
   *
   * @param name the state's name
   * @return its values, flattened in row-major order
   * @throws TvmgenException if there is no such state or it is not float32
   * @throws IllegalStateException if the model is closed
   */
  public synchronized float[] getStateFloats(String name) {
    requireFloat32(states, stateIndex(name), "state");
    return getState(name).toFloatArray();
  }

  /**
   * Replaces a float32 state's value; the next run reads it.
   *
   * @param name the state's name
   * @param values exactly the state's element count of values
   * @throws TvmgenException if there is no such state, it is not float32, or the number of values is wrong
   *     (the message names the state, its dtype and shape)
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setState(String name, float[] values) {
    int index = stateIndex(name);
    requireFloat32(states, index, "state");
    ByteBuffer b = ByteBuffer.allocateDirect(values.length * 4).order(ByteOrder.nativeOrder());
    b.asFloatBuffer().put(values);
    NativeLib.modelSetStateBuffer(checkOpen(), index, b, 0, b.capacity());
  }

  /**
   * Replaces a state's value with the bytes between a direct buffer's position and limit (native byte
   * order, as {@link #setInput(int, ByteBuffer)} takes them); the next run reads it.
   *
   * @param name the state's name
   * @param data a direct, native-order buffer holding exactly the state's bytes
   * @throws IllegalArgumentException if the buffer is not direct or not in native byte order
   * @throws TvmgenException if there is no such state or the size is wrong
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setState(String name, ByteBuffer data) {
    int index = stateIndex(name);
    checkBuffer(data, states, index, "state");
    NativeLib.modelSetStateBuffer(checkOpen(), index, data, data.position(), data.remaining());
  }

  /**
   * Replaces a state's value with a {@link Tensor}'s bytes (e.g. one {@link #getState(String)} returned).
   *
   * @param name the state's name
   * @param tensor a tensor of the state's size
   * @throws TvmgenException if there is no such state or the size is wrong
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void setState(String name, Tensor tensor) {
    int index = stateIndex(name);
    NativeLib.modelSetStateBuffer(checkOpen(), index, tensor.buffer(), 0, checkedSize(tensor));
  }

  /**
   * A host copy of every state's value held now, for {@link #restoreState(SavedState)}.
   *
   * @return the saved state (no state tensors: an empty one)
   * @throws IllegalStateException if the model is closed
   */
  public synchronized SavedState saveState() {
    byte[][] bytes = new byte[states.size()][];
    for (int i = 0; i < states.size(); ++i) {
      bytes[i] = getState(states.get(i).name()).toByteArray();
    }
    return new SavedState(states, bytes);
  }

  /**
   * Puts back every state saved by {@link #saveState()} (of this model, or one with the same states).
   *
   * @param saved what {@link #saveState()} returned
   * @throws TvmgenException if the saved states are not this model's (names, dtypes, shapes)
   * @throws IllegalStateException if the model is closed
   */
  public synchronized void restoreState(SavedState saved) {
    long h = checkOpen();
    if (!saved.states().equals(states)) {
      throw new TvmgenException("the saved state holds " + saved.states() + ", this model's state is " + states
          + ": restore a state saved from this model (or one compiled the same)");
    }
    for (int i = 0; i < states.size(); ++i) {
      ByteBuffer b = ByteBuffer.allocateDirect(saved.bytesAt(i).length).order(ByteOrder.nativeOrder());
      NativeLib.modelSetStateBuffer(h, i, b.put(saved.bytesAt(i)), 0, b.capacity());
    }
  }

  private int stateIndex(String name) {
    long h = checkOpen();
    if (name == null) {
      throw new NullPointerException("name");
    }
    return NativeLib.modelStateIndex(h, name);
  }

  // ------------------------------------------------------------------ timings, profile, memory, lifetime

  /**
   * The runtime's timings so far.
   *
   * @return a snapshot: load, init and first run, and the latest run's copy-in, run and copy-out
   * @throws IllegalStateException if the model is closed
   */
  public synchronized Timings timings() {
    double[] t = NativeLib.modelTimings(checkOpen());
    return new Timings(t[0], t[1], t[2], t[3], t[4], t[5], (int) t[6]);
  }

  /**
   * Times every kernel of the model: runs it {@code runs} times plain and {@code runs} times with
   * every call the VM makes timed (interleaved, after one warm-up run), on the inputs set so far.
   *
   * <p>The kernels' time in the median profiled run ({@link Profile#kernelsMedianMs()}) is what the
   * kernels account for of a run, to compare with the median plain run ({@link Profile#wholeRunMs()}).
   * Neither {@link #timings()} nor the outputs of the latest {@link #run()} change.
   *
   * @param runs profiled runs (and as many plain ones), at least 1
   * @return the profile
   * @throws IllegalArgumentException if {@code runs} is less than 1
   * @throws TvmgenException if an input was never set, a run fails, or the native runtime was built
   *     without its profiler (jni/src/profiler.cc)
   * @throws IllegalStateException if the model is closed
   */
  public synchronized Profile profile(int runs) {
    long h = checkOpen();
    if (runs < 1) {
      throw new IllegalArgumentException("profile: runs must be at least 1, got " + runs);
    }
    return new Profile(NativeLib.modelProfile(h, runs));
  }

  /**
   * The process's resident memory: before and just after this model was loaded, and now. Call it
   * after the runs for the overall peak, as {@code tvmgen-run} reports it.
   *
   * @return a snapshot (zeros where /proc/self/status does not exist)
   * @throws IllegalStateException if the model is closed
   */
  public synchronized Memory memory() {
    checkOpen();
    long[] now = NativeLib.residentMemory();
    return new Memory(beforeLoadBytes, afterLoadPeakBytes, now[1], now[0]);
  }

  /**
   * The model's directory, device, inputs and outputs.
   *
   * @return a one-line description
   */
  @Override
  public synchronized String toString() {
    if (isClosed()) {
      return "Model(" + directory + ", closed)";
    }
    return "Model(" + directory + " on " + deviceName + ", inputs " + inputs + ", outputs " + outputs
        + (states.isEmpty() ? "" : ", state " + states) + ")";
  }

  /** Frees the model's native memory (library, VM, weights, inputs, outputs and state). */
  @Override
  void free(long h) {
    NativeLib.modelFree(h);
  }

  @Override
  String closedMessage() {
    return "the model loaded from " + directory + " is closed";
  }

  private static void requireFloat32(List<TensorInfo> list, int index, String what) {
    if (index >= 0 && index < list.size() && !list.get(index).isFloat32()) {
      TensorInfo t = list.get(index);
      throw new TvmgenException(what + " \"" + t.name() + "\" is " + t.dtype() + ", not float32: pass its bytes in "
          + "a direct ByteBuffer instead of a float[]");
    }
  }

  private static void checkBuffer(ByteBuffer buf, List<TensorInfo> list, int index, String what) {
    if (buf == null) {
      throw new NullPointerException(what + " buffer");
    }
    if (!buf.isDirect()) {
      throw new IllegalArgumentException(what + " " + index + ": the ByteBuffer must be direct "
          + "(ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder())); for heap data use the float[] methods");
    }
    if (index >= 0 && index < list.size() && list.get(index).elementSize() > 1
        && buf.order() != ByteOrder.nativeOrder()) {
      throw new IllegalArgumentException(what + " \"" + list.get(index).name() + "\" (" + list.get(index).dtype()
          + "): the ByteBuffer must be in native byte order (" + ByteOrder.nativeOrder()
          + "); call buffer.order(ByteOrder.nativeOrder())");
    }
  }

  private static int checkedSize(Tensor tensor) {
    long n = tensor.byteSize();
    if (n > tensor.buffer().capacity()) {
      throw new IllegalArgumentException(tensor + " is larger than its buffer");
    }
    return (int) n;
  }
}
