import java.io.FileOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.tvmgen.Device;
import org.tvmgen.Model;
import org.tvmgen.PrepareStats;

/**
 * Model.prepare() on the real JNI path. Arguments: an OpenCL (or Vulkan) artifact, a CPU artifact, a file for the OpenCL
 * model's output 0 (little-endian float32) after one run on inputs of sin(0.37 i). Prints "prepared JSON" (the
 * OpenCL model's first prepare()); any failed check exits non-zero with the reason.
 */
public final class PrepareCheck {
  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  public static void main(String[] args) throws Exception {
    try (Model model = Model.load(args[0], 1, Model.AFFINITY_ANY)) {
      PrepareStats first = model.prepare();
      System.out.println("prepared " + first.toJson());
      // OpenCL builds programs (several kernels each); Vulkan creates a pipeline per kernel
      int units = model.device() == Device.VULKAN ? first.kernels() : first.programs();
      check(first.built() + first.cached() == units && first.kernels() >= first.programs(), first.toJson());
      check(model.prepare().toJson().equals(first.toJson()), "a second prepare() returns the first's stats");
      for (int k = 0; k < model.inputs().size(); k++) {
        float[] x = new float[(int) (model.inputs().get(k).byteSize() / 4)];
        for (int i = 0; i < x.length; i++) {
          x[i] = (float) Math.sin(i * 0.37);
        }
        model.setInput(k, x);
      }
      model.run();
      float[] y = model.getOutputFloats(0);
      ByteBuffer b = ByteBuffer.allocate(4 * y.length).order(ByteOrder.LITTLE_ENDIAN);
      b.asFloatBuffer().put(y);
      try (FileOutputStream out = new FileOutputStream(args[2])) {
        out.write(b.array());
      }
    }
    try (Model cpu = Model.load(args[1], 1, Model.AFFINITY_ANY)) {
      PrepareStats none = cpu.prepare();
      check(none.programs() == 0 && none.kernels() == 0 && none.built() == 0, "a CPU model: " + none.toJson());
    }
    Model closed = Model.load(args[1], 1, Model.AFFINITY_ANY);
    closed.close();
    try {
      closed.prepare();
      check(false, "prepare() on a closed model throws");
    } catch (IllegalStateException expected) {
      // as every method of a closed model
    }
  }
}
