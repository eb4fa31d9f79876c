package org.tvmgen;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * Command-line runner, the Java twin of {@code tvmgen-run}: loads an artifact directory, fills its
 * inputs, runs it, prints statistics of each output and the timings as JSON.
 *
 * <pre>
 * java -Djava.library.path=BUILD_DIR -cp tvmgen.jar org.tvmgen.RunModel ARTIFACT_DIR [options]
 *   -i, --input [NAME=]FILE   an input's raw bytes, little-endian (numpy: x.astype('&lt;f4').tofile(FILE));
 *                             repeatable; NAME= may be left out when inputs are given in order.
 *                             Inputs not given get the deterministic pseudo-random values of
 *                             tvmgen-run (float32) or zeros.
 *   -o, --output-dir DIR      write each output as NAME.bin (raw little-endian bytes) in DIR
 *   --warmup N                untimed runs before the timed ones (default 1)
 *   --repeat N                timed runs (default 10)
 *   --threads N               CPU threads (default: one per core)
 *   --affinity big|little|any which CPU cores to use (default any)
 *   --lib PATH                the JNI library file or its directory (default: -Dtvmgen.library.path,
 *                             else java.library.path)
 *   --profile FILE            also time each kernel over --repeat runs ({@link Model#profile(int)});
 *                             {"device", "arch", "profile"} to FILE, as tvmgen-run --profile writes it
 * </pre>
 *
 * <p>Output statistics go to standard output, one line per output; the last line is one JSON
 * object: device, arch, warmup, repeat, the median and minimum run time of the timed runs, and the
 * runtime's {@link Timings#toJson()} under "timings", and the peak resident memory after load and
 * overall ({@link Memory#toJson()}) under "memory". Exit status: 0, 1 on a runtime error, 2 on a
 * usage error.
 */
public final class RunModel {
  private static final String USAGE =
      "usage: java -cp tvmgen.jar org.tvmgen.RunModel ARTIFACT_DIR [options]\n"
      + "  -i, --input [NAME=]FILE   an input's raw little-endian bytes; repeatable. NAME= may be left out\n"
      + "                            when inputs are given in order. Inputs not given get deterministic\n"
      + "                            pseudo-random values (float32) or zeros.\n"
      + "  -o, --output-dir DIR      write each output as NAME.bin (raw little-endian bytes) in DIR\n"
      + "  --warmup N                untimed runs before the timed ones (default 1)\n"
      + "  --repeat N                timed runs (default 10)\n"
      + "  --threads N               CPU threads (default: one per core)\n"
      + "  --affinity big|little|any which CPU cores to use (default any)\n"
      + "  --lib PATH                the JNI library (libtvmgen_jni.so) or its directory\n"
      + "  --profile FILE            also time each kernel over --repeat runs; the profile JSON to FILE\n"
      + "  -h, --help                this text\n";

  private RunModel() {}

  /**
   * Runs the command line.
   *
   * @param args the arguments described above
   */
  public static void main(String[] args) {
    System.exit(run(args));
  }

  /**
   * Runs the command line without exiting the JVM.
   *
   * @param args the arguments described above
   * @return the exit status: 0, 1 on a runtime error, 2 on a usage error
   */
  public static int run(String[] args) {
    String dir = null;
    String outputDir = null;
    String lib = null;
    String profileFile = null;
    List<String> inputFlags = new ArrayList<String>();
    int warmup = 1;
    int repeat = 10;
    int threads = 0;
    int affinity = Model.AFFINITY_ANY;
    try {
      for (int i = 0; i < args.length; ++i) {
        String a = args[i];
        if (a.equals("-h") || a.equals("--help")) {
          System.out.print(USAGE);
          return 0;
        } else if (a.equals("-i") || a.equals("--input")) {
          inputFlags.add(value(args, ++i, a));
        } else if (a.equals("-o") || a.equals("--output-dir")) {
          outputDir = value(args, ++i, a);
        } else if (a.equals("--warmup")) {
          warmup = Integer.parseInt(value(args, ++i, a));
        } else if (a.equals("--repeat")) {
          repeat = Integer.parseInt(value(args, ++i, a));
        } else if (a.equals("--threads")) {
          threads = Integer.parseInt(value(args, ++i, a));
        } else if (a.equals("--affinity")) {
          String v = value(args, ++i, a);
          if (v.equals("big")) {
            affinity = Model.AFFINITY_BIG;
          } else if (v.equals("little")) {
            affinity = Model.AFFINITY_LITTLE;
          } else if (v.equals("any")) {
            affinity = Model.AFFINITY_ANY;
          } else {
            return usage("--affinity takes big, little or any, not " + v);
          }
        } else if (a.equals("--lib")) {
          lib = value(args, ++i, a);
        } else if (a.equals("--profile")) {
          profileFile = value(args, ++i, a);
        } else if (a.startsWith("-")) {
          return usage("unknown option " + a);
        } else if (dir == null) {
          dir = a;
        } else {
          return usage("more than one artifact directory given (" + dir + ", " + a + ")");
        }
      }
    } catch (NumberFormatException e) {
      return usage("expected a number: " + e.getMessage());
    } catch (IllegalArgumentException e) {
      return usage(e.getMessage());
    }
    if (dir == null) {
      return usage("no artifact directory given");
    }
    if (repeat < 1 || warmup < 0) {
      return usage("--repeat must be >= 1 and --warmup >= 0");
    }

    try {
      if (lib != null) {
        Model.loadNativeLibrary(lib);
      }
      try (Model model = Model.load(dir, threads, affinity)) {
        return runModel(model, inputFlags, outputDir, warmup, repeat, profileFile);
      }
    } catch (TvmgenException e) {
      System.err.println("RunModel: error: " + e.getMessage());
      return 1;
    } catch (IOException e) {
      System.err.println("RunModel: error: " + e);
      return 1;
    }
  }

  private static int runModel(Model model, List<String> inputFlags, String outputDir, int warmup, int repeat,
                              String profileFile) throws IOException {
    List<TensorInfo> inputs = model.inputs();
    Tensor[] in = new Tensor[inputs.size()];
    for (int k = 0; k < inputFlags.size(); ++k) {
      String flag = inputFlags.get(k);
      int eq = flag.indexOf('=');
      int index;
      String path;
      if (eq < 0) {
        if (k >= inputs.size()) {
          throw new TvmgenException("more --input files than model inputs (" + inputs.size() + ")");
        }
        index = k;
        path = flag;
      } else {
        index = model.inputIndex(flag.substring(0, eq));
        path = flag.substring(eq + 1);
      }
      in[index] = readInput(path, inputs.get(index));
    }
    for (int k = 0; k < inputs.size(); ++k) {
      if (in[k] == null) {
        System.err.println("RunModel: input \"" + inputs.get(k).name() + "\" not given: using pseudo-random values");
        in[k] = pseudoRandom(inputs.get(k), PseudoRandom.FIRST_SEED + k);
      }
    }
    for (int k = 0; k < inputs.size(); ++k) {  // the same inputs every run: bound once, read in place where they can be
      Tensor bound = model.allocateInput(k).copyFrom(in[k].toByteArray());
      model.bindInput(k, bound);
      in[k] = bound;
    }
    List<TensorInfo> outputs = model.outputs();
    Tensor[] out = new Tensor[outputs.size()];
    for (int k = 0; k < outputs.size(); ++k) {
      out[k] = model.allocateOutput(k);
      model.bindOutput(k, out[k]);  // each run leaves the output there (in place where the kernels can write it)
    }

    double[] runMs = new double[repeat];
    for (int r = 0; r < warmup + repeat; ++r) {
      model.run();
      if (r >= warmup) {
        runMs[r - warmup] = model.timings().runMs();
      }
    }

    File dir = outputDir == null ? null : new File(outputDir);
    if (dir != null && !dir.isDirectory() && !dir.mkdirs()) {  // -o DIR may not exist yet
      throw new IOException("cannot create the output directory " + dir);
    }
    for (int k = 0; k < out.length; ++k) {
      System.out.println("output " + stats(out[k]));
      if (outputDir != null) {
        writeLittleEndian(out[k], new File(dir, safeName(outputs.get(k).name()) + ".bin"));
      }
    }
    Arrays.sort(runMs);
    if (profileFile != null) {  // as tvmgen-run: after the timed runs, before the overall memory peak
      Profile profile = model.profile(repeat);
      try (OutputStream os = new FileOutputStream(profileFile)) {
        os.write(("{\"device\": \"" + model.device().deviceName() + "\", \"arch\": \"" + Model.runtimeArch()
            + "\", \"profile\": " + profile.toJson() + "}\n").getBytes("UTF-8"));
      }
      System.err.println("RunModel: " + profile);
    }
    Memory memory = model.memory();
    Timings t = model.timings();
    StringBuilder inPlace = new StringBuilder();  // the latest run's kernels wrote the output into out[k]
    for (int k = 0; k < out.length; ++k) {
      inPlace.append(k == 0 ? "" : ", ").append(model.outputWrittenInPlace(k));
    }
    StringBuilder readInPlace = new StringBuilder();  // and read the input from in[k]
    for (int k = 0; k < in.length; ++k) {
      readInPlace.append(k == 0 ? "" : ", ").append(model.inputReadInPlace(k));
    }
    System.out.println(String.format(Locale.ROOT,
        "{\"device\": \"%s\", \"arch\": \"%s\", \"warmup\": %d, \"repeat\": %d, \"median_run_ms\": %.4f, "
            + "\"min_run_ms\": %.4f, \"inputs_in_place\": [%s], \"outputs_in_place\": [%s], \"timings\": %s, "
            + "\"memory\": %s}",
        model.device().deviceName(), Model.runtimeArch(), warmup, repeat, runMs[runMs.length / 2], runMs[0],
        readInPlace, inPlace, t.toJson(), memory.toJson()));
    System.err.println("RunModel: " + model.directory() + " on " + model.device() + ": " + t);
    if (memory.isAvailable()) {
      System.err.println("RunModel: " + memory);
    }
    return 0;
  }

  private static String value(String[] args, int i, String flag) {
    if (i >= args.length) {
      throw new IllegalArgumentException(flag + " needs a value");
    }
    return args[i];
  }

  private static int usage(String message) {
    System.err.print("RunModel: " + message + "\n" + USAGE);
    return 2;
  }

  /** The values tvmgen-run uses ({@link PseudoRandom}); zeros for types other than float32. */
  private static Tensor pseudoRandom(TensorInfo info, int seed) {
    Tensor t = Tensor.allocate(info);
    if (info.isFloat32()) {
      t.asFloatBuffer().put(PseudoRandom.floats((int) info.elementCount(), seed));
    }
    return t;
  }

  private static Tensor readInput(String path, TensorInfo info) throws IOException {
    File file = new File(path);
    if (file.length() != info.byteSize()) {
      throw new TvmgenException("input \"" + info.name() + "\" (" + info + ") takes " + info.byteSize()
          + " bytes, " + path + " has " + (file.exists() ? file.length() + " bytes" : "none: it does not exist"));
    }
    Tensor t = Tensor.allocate(info);
    ByteBuffer b = t.buffer().duplicate();
    try (RandomAccessFile raf = new RandomAccessFile(file, "r"); FileChannel ch = raf.getChannel()) {
      while (b.hasRemaining() && ch.read(b) >= 0) {
        // read it all
      }
    }
    swapIfBigEndian(t);
    return t;
  }

  private static void writeLittleEndian(Tensor t, File file) throws IOException {
    byte[] bytes = t.toByteArray();
    if (ByteOrder.nativeOrder() == ByteOrder.BIG_ENDIAN) {
      reverseElements(bytes, t.info().elementSize());
    }
    try (OutputStream os = new FileOutputStream(file)) {
      os.write(bytes);
    }
  }

  private static void swapIfBigEndian(Tensor t) {
    if (ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN || t.info().elementSize() <= 1) {
      return;
    }
    byte[] bytes = t.toByteArray();
    reverseElements(bytes, t.info().elementSize());
    t.copyFrom(bytes);
  }

  private static void reverseElements(byte[] bytes, int size) {
    for (int i = 0; i + size <= bytes.length; i += size) {
      for (int a = i, z = i + size - 1; a < z; ++a, --z) {
        byte tmp = bytes[a];
        bytes[a] = bytes[z];
        bytes[z] = tmp;
      }
    }
  }

  private static String stats(Tensor t) {
    TensorInfo info = t.info();
    if (!info.isFloat32() || info.elementCount() == 0) {
      return info + " (" + info.byteSize() + " bytes)";
    }
    float[] v = t.toFloatArray();
    double sum = 0;
    float min = Float.POSITIVE_INFINITY;
    float max = Float.NEGATIVE_INFINITY;
    int argmax = 0;
    for (int i = 0; i < v.length; ++i) {
      sum += v[i];
      min = Math.min(min, v[i]);
      if (v[i] > max) {
        max = v[i];
        argmax = i;
      }
    }
    return String.format(Locale.ROOT, "%s: min %.6g, max %.6g, mean %.6g, argmax %d", info, min, max,
        sum / v.length, argmax);
  }

  private static String safeName(String name) {
    StringBuilder sb = new StringBuilder();
    for (char c : name.toCharArray()) {
      sb.append(((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) || c == '-' || c == '_' || c == '.' ? c : '_');
    }
    return sb.toString();
  }
}
