import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.util.List;
import org.tvmgen.Model;
import org.tvmgen.Tensor;
import org.tvmgen.TensorInfo;

/**
 * Test harness for tests/runtime/test_host_direct_calls.py: {@code Model.bindInput} and {@code Model.bindOutput}
 * on a stateless CPU model, through new frames written into the bound input and a change of the tensors bound.
 *
 * <pre>
 * java -cp tvmgen.jar:CLASSES BindCheck ARTIFACT_DIR IN_DIR OUT_DIR
 * </pre>
 *
 * IN_DIR holds NAME.1.bin and NAME.2.bin per input (two frames, raw little-endian bytes). OUT_DIR receives, per
 * output K: {@code bound_K.bin} (frame 1 in the bound input, the aligned output tensor bound, after two runs),
 * {@code frame2_K.bin} (frame 2 written into the bound input tensor, one more run), {@code rebound_K.bin}
 * (getOutput just after another output tensor was bound, before a run: still frame 2's output),
 * {@code unaligned_K.bin} (that tensor, 4 bytes past a 64-byte boundary, after a run), {@code unbound_K.bin}
 * (inputs and outputs unbound, a run: the input keeps frame 2), {@code again_K.bin} (frame 1 by setInput, a run).
 * Prints one JSON line: per run, inputReadInPlace and outputWrittenInPlace.
 */
public final class BindCheck {
  public static void main(String[] args) throws Exception {
    File in = new File(args[1]);
    File out = new File(args[2]);
    out.mkdirs();
    try (Model model = Model.load(args[0], 1, Model.AFFINITY_ANY)) {
      List<TensorInfo> inputs = model.inputs();
      int m = inputs.size();
      int n = model.outputs().size();
      Tensor[] input = new Tensor[m];
      for (int k = 0; k < m; ++k) {
        input[k] = model.allocateInput(k).copyFrom(frame(in, inputs.get(k), 1));
        model.bindInput(k, input[k]);
      }
      Tensor[] output = new Tensor[n];
      for (int k = 0; k < n; ++k) {
        output[k] = model.allocateOutput(k);
        model.bindOutput(k, output[k]);
      }
      StringBuilder json = new StringBuilder("{\"runs\": [");
      model.run();  // records the calls: the inputs copied in, the outputs copied out
      json.append(inPlace(model, m, n)).append(", ");
      model.run();  // the recorded calls, reading and writing the bound tensors where they can
      json.append(inPlace(model, m, n)).append(", ");
      write(output, out, "bound");
      for (int k = 0; k < m; ++k) {
        input[k].copyFrom(frame(in, inputs.get(k), 2));  // the next frame, where the app bound its input
      }
      model.run();
      json.append(inPlace(model, m, n)).append(", ");
      write(output, out, "frame2");
      for (int k = 0; k < n; ++k) {
        TensorInfo info = model.outputs().get(k);
        ByteBuffer whole = ByteBuffer.allocateDirect((int) info.byteSize() + 68);
        int skip = whole.alignmentOffset(0, 64) == 0 ? 4 : 64 - whole.alignmentOffset(0, 64) + 4;
        whole.position(skip);
        whole.limit(skip + (int) info.byteSize());
        output[k] = Tensor.wrap(info, whole.slice().order(ByteOrder.nativeOrder()));
        model.bindOutput(k, output[k]);
        Tensor copy = Tensor.allocate(info);
        model.getOutput(k, copy);
        write(new Tensor[] {copy}, out, "rebound", k);
      }
      model.run();
      json.append(inPlace(model, m, n)).append(", ");
      write(output, out, "unaligned");
      for (int k = 0; k < n; ++k) {
        model.bindOutput(k, null);
      }
      for (int k = 0; k < m; ++k) {
        model.bindInput(k, null);
      }
      model.run();
      json.append(inPlace(model, m, n)).append(", ");
      write(copies(model, n), out, "unbound");
      for (int k = 0; k < m; ++k) {
        model.setInput(k, Tensor.allocate(inputs.get(k)).copyFrom(frame(in, inputs.get(k), 1)));
      }
      model.run();
      json.append(inPlace(model, m, n)).append("]}");
      write(copies(model, n), out, "again");
      System.out.println(json);
    }
  }

  private static byte[] frame(File dir, TensorInfo info, int k) throws Exception {
    return Files.readAllBytes(new File(dir, info.name() + "." + k + ".bin").toPath());
  }

  private static Tensor[] copies(Model model, int n) {
    Tensor[] t = new Tensor[n];
    for (int k = 0; k < n; ++k) {
      t[k] = Tensor.allocate(model.outputs().get(k));
      model.getOutput(k, t[k]);
    }
    return t;
  }

  private static String inPlace(Model model, int m, int n) {
    StringBuilder s = new StringBuilder("[[");
    for (int k = 0; k < m; ++k) {
      s.append(k == 0 ? "" : ", ").append(model.inputReadInPlace(k));
    }
    s.append("], [");
    for (int k = 0; k < n; ++k) {
      s.append(k == 0 ? "" : ", ").append(model.outputWrittenInPlace(k));
    }
    return s.append("]]").toString();
  }

  private static void write(Tensor[] t, File dir, String stage) throws Exception {
    for (int k = 0; k < t.length; ++k) {
      write(new Tensor[] {t[k]}, dir, stage, k);
    }
  }

  private static void write(Tensor[] one, File dir, String stage, int k) throws Exception {
    Files.write(new File(dir, stage + "_" + k + ".bin").toPath(), one[0].toByteArray());
  }
}
