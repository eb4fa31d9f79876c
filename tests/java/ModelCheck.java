import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.util.List;
import org.tvmgen.Memory;
import org.tvmgen.Model;
import org.tvmgen.Profile;
import org.tvmgen.Tensor;
import org.tvmgen.TensorInfo;
import org.tvmgen.TvmgenException;

/**
 * Test harness for tests/runtime/test_java.py: exercises org.tvmgen.Model on one artifact and writes what
 * it saw into OUT_DIR for Python to compare with the Python VM.
 *
 * <pre>
 * java -cp tvmgen.jar:CLASSES ModelCheck ARTIFACT_DIR IN_DIR OUT_DIR EXTRA_RUNS [LIB_PATH]
 * </pre>
 *
 * IN_DIR holds NAME.bin per input (float32, little-endian). OUT_DIR receives
 * float_K.bin / array_K.bin / buffer_K.bin / tensor_K.bin per output (float[] via getOutputFloats,
 * float[] via getOutput, ByteBuffer, Tensor), info.txt, timings.json, runs.txt, errors.tsv
 * (check, exception class or "none", message), and from Model.profile / Model.memory:
 * profile.json (the runtime's JSON), profile.tsv (name, calls, total ms, builtin, as Profile parsed
 * it), profile.txt, runs_after_profile.txt, memory.json and proc_hwm.txt (this JVM's VmHWM in bytes
 * read by Java from /proc/self/status just before and just after Model.memory()).
 * The system property modelcheck.profile.runs sets the profiled runs (default 20).
 */
public final class ModelCheck {
  private static PrintWriter errors;

  interface Check {
    void run() throws Exception;
  }

  public static void main(String[] args) throws Exception {
    String dir = args[0];
    File in = new File(args[1]);
    File out = new File(args[2]);
    int extraRuns = Integer.parseInt(args[3]);
    if (args.length > 4) {
      Model.loadNativeLibrary(args[4]);
    }
    out.mkdirs();
    errors = new PrintWriter(new File(out, "errors.tsv"), "UTF-8");
    int runs = 0;

    final Model model = Model.load(dir, 0, Model.AFFINITY_ANY);
    List<TensorInfo> inputs = model.inputs();
    List<TensorInfo> outputs = model.outputs();
    try (PrintWriter info = new PrintWriter(new File(out, "info.txt"), "UTF-8")) {
      info.println("device\t" + model.device().deviceName() + "\t" + model.device().dlDeviceType());
      info.println("arch\t" + Model.runtimeArch());
      for (TensorInfo t : inputs) {
        info.println("input\t" + t.name() + "\t" + t.dtype() + "\t" + join(t.shape()) + "\t" + t.byteSize());
      }
      for (TensorInfo t : outputs) {
        info.println("output\t" + t.name() + "\t" + t.dtype() + "\t" + join(t.shape()) + "\t" + t.byteSize());
      }
    }
    float[][] data = new float[inputs.size()][];
    for (int i = 0; i < inputs.size(); ++i) {
      data[i] = readFloats(new File(in, inputs.get(i).name() + ".bin"));
    }

    // 1. float[] inputs by name, set in reverse order (names must map to the right inputs)
    for (int i = inputs.size() - 1; i >= 0; --i) {
      model.setInput(inputs.get(i).name(), data[i]);
    }
    model.run();
    runs++;
    for (int k = 0; k < outputs.size(); ++k) {
      writeFloats(model.getOutputFloats(k), new File(out, "float_" + k + ".bin"));
      float[] arr = new float[(int) outputs.get(k).elementCount()];
      model.getOutput(k, arr);
      writeFloats(arr, new File(out, "array_" + k + ".bin"));
    }

    // 2. direct ByteBuffers by index, at non-zero positions (zero-copy path)
    for (int i = 0; i < inputs.size(); ++i) {
      int n = (int) inputs.get(i).byteSize();
      ByteBuffer b = ByteBuffer.allocateDirect(n + 12).order(ByteOrder.nativeOrder());
      b.position(12);
      b.asFloatBuffer().put(data[i]);
      model.setInput(i, b);
      if (b.position() != 12 || b.limit() != n + 12) {
        throw new AssertionError("setInput moved the buffer's position/limit");
      }
    }
    model.run();
    runs++;
    for (int k = 0; k < outputs.size(); ++k) {
      int n = (int) outputs.get(k).byteSize();
      ByteBuffer b = ByteBuffer.allocateDirect(n + 8).order(ByteOrder.nativeOrder());
      b.position(8);
      model.getOutput(k, b);
      float[] v = new float[n / 4];
      b.asFloatBuffer().get(v);
      writeFloats(v, new File(out, "buffer_" + k + ".bin"));
    }

    // 3. Tensors
    for (int i = 0; i < inputs.size(); ++i) {
      Tensor t = model.allocateInput(inputs.get(i).name()).copyFrom(data[i]);
      model.setInput(inputs.get(i).name(), t);
    }
    model.run();
    runs++;
    for (int k = 0; k < outputs.size(); ++k) {
      Tensor t = model.allocateOutput(k);
      model.getOutput(k, t);
      writeFloats(t.toFloatArray(), new File(out, "tensor_" + k + ".bin"));
    }

    for (int r = 0; r < extraRuns; ++r) {
      model.run();
      runs++;
    }
    write(new File(out, "timings.json"), model.timings().toJson());
    write(new File(out, "timings.txt"), model.timings().toString());
    write(new File(out, "runs.txt"), Integer.toString(runs));

    // 4. per-kernel profile, then the resident memory (after load, and overall after the profile's runs)
    Profile profile = model.profile(Integer.getInteger("modelcheck.profile.runs", 20));
    write(new File(out, "profile.json"), profile.toJson());
    write(new File(out, "profile.txt"), profile.toString());
    try (PrintWriter w = new PrintWriter(new File(out, "profile.tsv"), "UTF-8")) {
      for (Profile.Entry e : profile.entries()) {
        w.println(e.name() + "\t" + e.calls() + "\t" + e.totalMs() + "\t" + e.isBuiltin());
      }
    }
    write(new File(out, "runs_after_profile.txt"), Integer.toString(model.timings().runs()));
    long hwmBefore = procStatus("VmHWM");
    Memory memory = model.memory();
    long hwmAfter = procStatus("VmHWM");
    write(new File(out, "memory.json"), memory.toJson());
    write(new File(out, "memory.txt"), memory.toString());
    write(new File(out, "proc_hwm.txt"), hwmBefore + "\t" + hwmAfter);

    // 5. errors
    final TensorInfo first = inputs.get(0);
    final int firstElems = (int) first.elementCount();
    check("wrong_size", () -> model.setInput(0, new float[firstElems - 1]));
    check("wrong_size_by_name", () -> model.setInput(first.name(), new float[firstElems + 1]));
    check("wrong_size_buffer", () -> model.setInput(0,
        ByteBuffer.allocateDirect((int) first.byteSize() - 4).order(ByteOrder.nativeOrder())));
    check("unknown_name", () -> model.setInput("no_such_input", new float[firstElems]));
    check("bad_input_index", () -> model.setInput(inputs.size(), new float[1]));
    check("heap_buffer", () -> model.setInput(0, ByteBuffer.allocate((int) first.byteSize())));
    check("wrong_order", () -> model.setInput(0,
        ByteBuffer.allocateDirect((int) first.byteSize()).order(ByteOrder.BIG_ENDIAN)));
    check("bad_output_index", () -> model.getOutputFloats(outputs.size()));
    check("output_too_small", () -> model.getOutput(0, new float[1]));
    check("output_buffer_too_small", () -> model.getOutput(0,
        ByteBuffer.allocateDirect(4).order(ByteOrder.nativeOrder())));
    check("unknown_output_name", () -> model.outputIndex("no_such_output"));
    check("load_missing", () -> Model.load(new File(out, "no_such_artifact").getPath()));
    check("bad_threads", () -> Model.load(dir, -1, 0));
    try (Model fresh = Model.load(dir)) {
      check("output_before_run", () -> fresh.getOutputFloats(0));
      check("run_without_inputs", fresh::run);
      check("profile_without_inputs", () -> fresh.profile(1));
    }
    // the good calls still work after the failed ones
    model.setInput(0, data[0]);
    model.run();
    runs++;
    check("still_works", () -> model.getOutputFloats(0));
    check("profile_zero_runs", () -> model.profile(0));

    model.close();
    model.close();  // closing twice is harmless
    check("closed_run", model::run);
    check("closed_set_input", () -> model.setInput(0, data[0]));
    check("closed_get_output", () -> model.getOutputFloats(0));
    check("closed_inputs", model::inputs);
    check("closed_timings", model::timings);
    check("closed_profile", () -> model.profile(1));
    check("closed_memory", model::memory);
    check("closed_is_closed", () -> {
      if (!model.isClosed()) {
        throw new AssertionError("isClosed() is false after close()");
      }
    });
    errors.close();
    System.out.println("ModelCheck: ok, " + runs + " runs");
  }

  private static void check(String name, Check c) {
    String result;
    try {
      c.run();
      result = "none\t";
    } catch (Throwable t) {
      result = t.getClass().getName() + "\t" + String.valueOf(t.getMessage()).replace('\n', ' ').replace('\t', ' ');
    }
    errors.println(name + "\t" + result);
  }

  /** A /proc/self/status field in bytes (the kernel writes kB), read here by Java itself; 0 if absent. */
  private static long procStatus(String key) throws IOException {
    File status = new File("/proc/self/status");
    if (!status.isFile()) {
      return 0;
    }
    for (String line : Files.readAllLines(status.toPath())) {
      if (line.startsWith(key + ":")) {
        return Long.parseLong(line.substring(key.length() + 1).trim().split("\\s+")[0]) * 1024;
      }
    }
    return 0;
  }

  private static String join(long[] shape) {
    StringBuilder sb = new StringBuilder();
    for (long d : shape) {
      sb.append(sb.length() == 0 ? "" : "x").append(d);
    }
    return sb.toString();
  }

  private static float[] readFloats(File f) throws IOException {
    ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(f.toPath())).order(ByteOrder.LITTLE_ENDIAN);
    float[] v = new float[b.remaining() / 4];
    b.asFloatBuffer().get(v);
    return v;
  }

  private static void writeFloats(float[] v, File f) throws IOException {
    ByteBuffer b = ByteBuffer.allocate(v.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    b.asFloatBuffer().put(v);
    try (OutputStream os = new FileOutputStream(f)) {
      os.write(b.array());
    }
  }

  private static void write(File f, String s) throws IOException {
    try (PrintWriter w = new PrintWriter(f, "UTF-8")) {
      w.println(s);
    }
  }
}
