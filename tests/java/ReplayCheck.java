import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.util.List;
import org.tvmgen.Model;
import org.tvmgen.TensorInfo;

/**
 * Test harness for tests/runtime/test_vulkan_java.py's recorded runs: a different input at every run, as a camera app
 * calls a model, so that a run that did not really run (or ran the wrong commands) shows in its outputs.
 *
 * <pre>
 * java -cp tvmgen.jar:CLASSES ReplayCheck ARTIFACT_DIR IN_DIR OUT_DIR ORDER
 * </pre>
 *
 * ORDER has a digit per run: the Model instance of the artifact that makes run K (e.g. "0000101010": one
 * model's four runs, then two models taking turns, as two models of an app would). Instance N is loaded
 * just before its first run. IN_DIR holds NAME_K.bin (the input's bytes, native order) for every input
 * NAME and run K. OUT_DIR receives out_K_J.bin, the bytes of output J of run K.
 */
public final class ReplayCheck {
  public static void main(String[] args) throws Exception {
    String dir = args[0];
    File in = new File(args[1]);
    File out = new File(args[2]);
    String order = args[3];
    out.mkdirs();
    Model[] models = new Model[10];
    int count = 0;
    for (int k = 0; k < order.length(); ++k) {
      int i = order.charAt(k) - '0';
      if (models[i] == null) {
        models[i] = Model.load(dir, 0, Model.AFFINITY_ANY);
        count++;
      }
      Model m = models[i];
      List<TensorInfo> inputs = m.inputs();
      int outputs = m.outputs().size();
      for (TensorInfo t : inputs) m.setInput(t.name(), read(new File(in, t.name() + "_" + k + ".bin")));
      m.run();
      for (int j = 0; j < outputs; ++j) {
        ByteBuffer b = ByteBuffer.allocateDirect((int) m.outputs().get(j).byteSize()).order(ByteOrder.nativeOrder());
        m.getOutput(j, b);
        write(b, new File(out, "out_" + k + "_" + j + ".bin"));
      }
    }
    for (Model m : models) {
      if (m != null) m.close();
    }
    System.out.println("ran " + order.length() + " runs on " + count + " model(s)");
  }

  private static ByteBuffer read(File f) throws IOException {
    byte[] bytes = Files.readAllBytes(f.toPath());
    ByteBuffer b = ByteBuffer.allocateDirect(bytes.length).order(ByteOrder.nativeOrder());
    b.put(bytes).flip();
    return b;
  }

  private static void write(ByteBuffer b, File f) throws IOException {
    byte[] bytes = new byte[b.remaining()];
    b.duplicate().get(bytes);
    try (OutputStream os = new FileOutputStream(f)) {
      os.write(bytes);
    }
  }
}
