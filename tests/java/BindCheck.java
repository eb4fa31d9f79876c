import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.util.List;
import org.tvmgen.Model;
import org.tvmgen.Tensor;
import org.tvmgen.TensorInfo;

/**
 * Test harness for tests/runtime/test_host_direct_calls.py: {@code Model.bindOutput} on a stateless CPU model,
 * through a change of the tensors bound.
 *
 * <pre>
 * java -cp tvmgen.jar:CLASSES BindCheck ARTIFACT_DIR IN_DIR OUT_DIR
 * </pre>
 *
 * IN_DIR holds NAME.bin per input (float32, little-endian). Every run has the same inputs. OUT_DIR receives, per
 * output K: {@code bound_K.bin} (the aligned tensor bound, after two runs), {@code rebound_K.bin} (getOutput
 * just after another tensor was bound, before a run: still the second run's output), {@code unaligned_K.bin}
 * (a tensor 4 bytes past a 64-byte boundary, bound, after a run), {@code unbound_K.bin} (getOutput after the
 * binding was dropped and the model ran again). Prints one JSON line: outputWrittenInPlace after each of the
 * four runs.
 */
public final class BindCheck {
  public static void main(String[] args) throws Exception {
    File in = new File(args[1]);
    File out = new File(args[2]);
    out.mkdirs();
    try (Model model = Model.load(args[0], 1, Model.AFFINITY_ANY)) {
      List<TensorInfo> inputs = model.inputs();
      for (int k = 0; k < inputs.size(); ++k) {
        byte[] bytes = Files.readAllBytes(new File(in, inputs.get(k).name() + ".bin").toPath());
        model.setInput(k, Tensor.allocate(inputs.get(k)).copyFrom(bytes));
      }
      int n = model.outputs().size();
      Tensor[] aligned = new Tensor[n];
      for (int k = 0; k < n; ++k) {
        aligned[k] = model.allocateOutput(k);
        model.bindOutput(k, aligned[k]);
      }
      StringBuilder json = new StringBuilder("{\"runs\": [");
      model.run();  // records the calls: copied into the bound tensors
      json.append(inPlace(model, n)).append(", ");
      model.run();  // the recorded calls, writing where they can into the bound tensors
      json.append(inPlace(model, n)).append(", ");
      for (int k = 0; k < n; ++k) {
        write(aligned[k], new File(out, "bound_" + k + ".bin"));
      }
      for (int k = 0; k < n; ++k) {
        TensorInfo info = model.outputs().get(k);
        ByteBuffer whole = ByteBuffer.allocateDirect((int) info.byteSize() + 68);
        int skip = whole.alignmentOffset(0, 64) == 0 ? 4 : 64 - whole.alignmentOffset(0, 64) + 4;
        whole.position(skip);
        whole.limit(skip + (int) info.byteSize());
        Tensor unaligned = Tensor.wrap(info, whole.slice().order(ByteOrder.nativeOrder()));
        model.bindOutput(k, unaligned);
        Tensor copy = Tensor.allocate(info);
        model.getOutput(k, copy);
        write(copy, new File(out, "rebound_" + k + ".bin"));
        aligned[k] = unaligned;
      }
      model.run();
      json.append(inPlace(model, n)).append(", ");
      for (int k = 0; k < n; ++k) {
        write(aligned[k], new File(out, "unaligned_" + k + ".bin"));
        model.bindOutput(k, null);
      }
      model.run();
      json.append(inPlace(model, n)).append("]}");
      for (int k = 0; k < n; ++k) {
        Tensor copy = Tensor.allocate(model.outputs().get(k));
        model.getOutput(k, copy);
        write(copy, new File(out, "unbound_" + k + ".bin"));
      }
      System.out.println(json);
    }
  }

  private static String inPlace(Model model, int n) {
    StringBuilder s = new StringBuilder("[");
    for (int k = 0; k < n; ++k) {
      s.append(k == 0 ? "" : ", ").append(model.outputWrittenInPlace(k));
    }
    return s.append("]").toString();
  }

  private static void write(Tensor t, File f) throws Exception {
    Files.write(f.toPath(), t.toByteArray());
  }
}
