import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.util.Arrays;
import org.tvmgen.ArtifactData;
import org.tvmgen.Model;
import org.tvmgen.TvmgenException;

/**
 * Model.load(ArtifactData) on the real JNI path: artifacts read into memory (library through an in-memory
 * file, weights as byte[] or direct ByteBuffer) give the outputs of the same artifact loaded from its
 * directory; the runtime keeps no reference to the bytes; several artifacts from memory one after another
 * and at once; a library found by name; the errors for a missing or extra library or weights.
 *
 * <p>args: OUT_DIR SEPARATE_PARAMS_DIR INLINE_DIR OTHER_DIR [LIBRARY_NAME]. Prints one "ok ..." line per
 * check; writes the separate-params model's input and from-memory output to OUT_DIR (compared with the
 * Python VM by the test); any failure exits non-zero with the reason.
 */
public final class MemoryCheck {
  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
    System.out.println("ok " + what);
  }

  static ArtifactData.Files dirFiles(final File dir) {
    return new ArtifactData.Files() {
      @Override
      public InputStream open(String fileName) throws IOException {
        return new FileInputStream(new File(dir, fileName));
      }
    };
  }

  static byte[] bytes(File dir, String name) throws IOException {
    return Files.readAllBytes(new File(dir, name).toPath());
  }

  static float[] input(Model model) {
    int n = (int) (model.inputs().get(0).byteSize() / 4);
    float[] x = new float[n];
    for (int i = 0; i < n; ++i) {
      x[i] = (float) Math.sin(i * 0.37);
    }
    return x;
  }

  static float[] runOnce(Model model) {
    try {
      model.setInput(0, input(model));
      model.run();
      return model.getOutputFloats(0);
    } finally {
      model.close();
    }
  }

  static ByteBuffer directAt(byte[] bytes, int offset) {
    ByteBuffer b = ByteBuffer.allocateDirect(bytes.length + offset + 5);
    b.position(offset);
    b.put(bytes);
    b.flip();
    b.position(offset);  // position..limit hold the bytes; the 5 bytes after them are not read
    return b;
  }

  static String errorOf(ArtifactData data) {
    try {
      Model.load(data).close();
      return "no error";
    } catch (TvmgenException e) {
      return e.getMessage();
    }
  }

  static void write(File file, float[] values) throws IOException {
    ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    b.asFloatBuffer().put(values);
    FileOutputStream out = new FileOutputStream(file);
    try {
      out.write(b.array());
    } finally {
      out.close();
    }
  }

  public static void main(String[] args) throws Exception {
    File out = new File(args[0]);
    File separate = new File(args[1]);
    File inline = new File(args[2]);
    File other = new File(args[3]);

    // the separate-params artifact: every file read through one opener (library and weights as byte[])
    float[] fromDir = runOnce(Model.load(separate.getPath(), 1, Model.AFFINITY_ANY));
    ArtifactData read = ArtifactData.read("separate (read)", dirFiles(separate));
    check(read.libraryFile().equals("model.so") && "model.params".equals(read.weightsFile()),
        "the manifest names " + read);
    Model model = Model.load(read, 1, Model.AFFINITY_ANY);
    check(model.directory().equals("separate (read)"), "the model is called by the artifact's name");
    float[] x = input(model);
    float[] fromMemory = runOnce(model);
    check(Arrays.equals(fromMemory, fromDir), "read from memory: the directory's outputs");
    write(new File(out, "input.bin"), x);
    write(new File(out, "output.bin"), fromMemory);

    // direct buffers at an offset; the app wipes the decrypted weights as soon as the load returns
    byte[] weights = bytes(separate, "model.params");
    ByteBuffer weightsBuffer = directAt(weights, 3);
    model = Model.load(ArtifactData.ofManifest("separate (buffers)", bytes(separate, "manifest.json"))
        .library(directAt(bytes(separate, "model.so"), 7)).weights(weightsBuffer), 1, Model.AFFINITY_ANY);
    check(weightsBuffer.position() == 3, "the buffer's position is left as it was");
    ByteBuffer wipe = weightsBuffer.duplicate();
    wipe.clear();
    while (wipe.hasRemaining()) {
      wipe.put((byte) 0);
    }
    check(Arrays.equals(runOnce(model), fromDir), "direct buffers, weights wiped after the load: the same outputs");

    byte[] manifest = bytes(separate, "manifest.json");
    byte[] library = bytes(separate, "model.so");
    String missing = errorOf(ArtifactData.ofManifest("separate", manifest).library(library));
    check(missing.contains("keeps its weights apart (model.params"), "no weights: " + missing);
    String noLibrary = errorOf(ArtifactData.ofManifest("separate", manifest).weights(weights));
    check(noLibrary.contains("neither was given"), "no library: " + noLibrary);
    byte[] truncated = Arrays.copyOf(weights, weights.length / 2);
    String corrupt = errorOf(ArtifactData.ofManifest("separate", manifest).library(library).weights(truncated));
    check(corrupt.contains("cannot read the weights in model.params of separate"), "truncated weights: " + corrupt);
    String notElf = errorOf(ArtifactData.ofManifest("separate", manifest).library(weights).weights(weights));
    check(notElf.contains("is built for not-elf"), "weights given as the library: " + notElf);

    // weights inside the library: weights given anyway are refused; a direct-buffer library
    float[] inlineDir = runOnce(Model.load(inline.getPath(), 1, Model.AFFINITY_ANY));
    byte[] inlineManifest = bytes(inline, "manifest.json");
    String extra = errorOf(ArtifactData.ofManifest("inline", inlineManifest).library(bytes(inline, "model.so"))
        .weights(weights));
    check(extra.contains("compiled without --separate-params"), "weights for a model without: " + extra);
    check(Arrays.equals(runOnce(Model.load(ArtifactData.read("inline", dirFiles(inline)))), inlineDir),
        "weights inside the library: the directory's outputs");

    // one artifact from memory after another, and several at once: each its own library (glibc finds a
    // loaded library by the path it was opened with, and /proc/self/fd/N numbers are reused)
    for (int round = 0; round < 3; ++round) {
      Model a = Model.load(ArtifactData.read("other", dirFiles(other)));
      check(a.inputs().get(0).name().equals("a") && a.inputs().size() == 2, "round " + round + ": other's inputs");
      a.close();
      Model b = Model.load(ArtifactData.read("inline", dirFiles(inline)));
      Model c = Model.load(ArtifactData.read("other", dirFiles(other)));
      check(c.inputs().size() == 2 && Arrays.equals(runOnce(b), inlineDir), "round " + round
          + ": two artifacts from memory at once");
      c.close();
    }

    // the library by name, as an Android app's packaged library (the dynamic linker's search path)
    if (args.length > 4) {
      Model named = Model.load(ArtifactData.ofManifest("inline (named)", inlineManifest).libraryPath(args[4]));
      check(Arrays.equals(runOnce(named), inlineDir), "a library found by name: the directory's outputs");
    }
  }
}
