import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.tvmgen.ArtifactData;
import org.tvmgen.Model;
import org.tvmgen.SavedState;
import org.tvmgen.Tensor;
import org.tvmgen.TvmgenException;

/**
 * A streaming model's state through the Java API (tests/runtime/test_streaming_native.py builds the model: one input
 * x, one output y, state tensors h, c and p). Arguments: the artifact (state from zeros), the same artifact
 * starting h from state/0.npy, the stateless artifact, and a folder with in/NNNNNN.bin (x of each step),
 * want/NNNNNN.bin (the reference's y of each step from zero state) and h0.bin (the initial h), all raw
 * float32. Prints one "ok ..." line per check; any failure exits non-zero with the reason.
 */
public final class StateCheck {
  static final double ATOL = 1e-5;

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
    System.out.println("ok " + what);
  }

  static float[] floats(File f) throws IOException {
    ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(f.toPath())).order(ByteOrder.LITTLE_ENDIAN);
    float[] out = new float[b.remaining() / 4];
    b.asFloatBuffer().get(out);
    return out;
  }

  static boolean close(float[] a, float[] b) {
    if (a.length != b.length) {
      return false;
    }
    for (int i = 0; i < a.length; ++i) {
      if (Math.abs(a[i] - b[i]) > ATOL) {
        return false;
      }
    }
    return true;
  }

  static float[] step(Model model, float[] x) {
    model.setInput(0, x);
    model.run();
    return model.getOutputFloats(0);
  }

  /** The message of the TvmgenException that {@code r} throws (an AssertionError if it throws none). */
  static String error(Runnable r) {
    try {
      r.run();
    } catch (TvmgenException e) {
      return e.getMessage();
    }
    throw new AssertionError("no TvmgenException");
  }

  public static void main(String[] args) throws Exception {
    File work = new File(args[3]);
    List<float[]> xs = new ArrayList<float[]>();
    List<float[]> want = new ArrayList<float[]>();
    for (int k = 0; new File(work, String.format("in/%06d.bin", k)).isFile(); ++k) {
      xs.add(floats(new File(work, String.format("in/%06d.bin", k))));
      want.add(floats(new File(work, String.format("want/%06d.bin", k))));
    }
    int n = xs.size();

    try (Model model = Model.load(args[0], 1, Model.AFFINITY_ANY)) {
      check(model.stateCount() == 3 && model.states().get(0).name().equals("h")
          && model.inputs().size() == 1 && model.inputs().get(0).name().equals("x")
          && model.outputs().size() == 1 && model.outputs().get(0).name().equals("y"),
          "the state tensors are apart from the inputs and outputs: " + model);

      List<float[]> ys = new ArrayList<float[]>();
      boolean all = true;
      for (int k = 0; k < n; ++k) {
        ys.add(step(model, xs.get(k)));
        all = all && close(ys.get(k), want.get(k));
      }
      check(all, n + " steps match the reference with the state threaded through");

      model.resetState();
      check(Arrays.equals(model.getStateFloats("c"), new float[xs.get(0).length]), "resetState zeroes the state");
      check(Arrays.equals(step(model, xs.get(0)), ys.get(0)), "after resetState the first step gives step 0's outputs");
      check(Arrays.equals(model.getStateFloats("c"), xs.get(0)) && Arrays.equals(model.getStateFloats("p"), xs.get(0)),
          "getStateFloats reads the state a run left (c = 0 + x, p = x)");

      // save, go on, restore, go on again: the same outputs
      for (int k = 1; k < 5; ++k) {
        step(model, xs.get(k));
      }
      SavedState saved = model.saveState();
      List<float[]> after = new ArrayList<float[]>();
      for (int k = 5; k < 10; ++k) {
        after.add(step(model, xs.get(k)));
      }
      model.restoreState(saved);
      Tensor h = model.getState("h");
      check(Arrays.equals(h.toByteArray(), saved.bytes("h")), "restoreState puts back the saved bytes");
      boolean same = true;
      for (int k = 5; k < 10; ++k) {
        same = same && Arrays.equals(step(model, xs.get(k)), after.get(k - 5));
      }
      check(same, "after restoreState the next steps give the same outputs");
      check(Arrays.equals(after.get(4), ys.get(9)), "steps 0-9 through save and restore give the sequence's step 9");

      // setState by value: the next run reads it
      float[] c = new float[xs.get(0).length];
      Arrays.fill(c, 0.75f);
      model.setState("c", c);
      check(Arrays.equals(model.getStateFloats("c"), c), "setState(float[]) then getStateFloats");
      model.setState("h", h);
      check(Arrays.equals(model.getState("h").toByteArray(), h.toByteArray()), "setState(Tensor)");

      String wrong = error(() -> model.setState("h", new float[3]));
      check(wrong.contains("\"h\"") && wrong.contains("float32") && wrong.contains("12"),
          "setState with the wrong size names the tensor: " + wrong);
      ByteBuffer big = ByteBuffer.allocateDirect(1000).order(ByteOrder.nativeOrder());
      wrong = error(() -> model.setState("c", big));
      check(wrong.contains("\"c\"") && wrong.contains("1000"), "setState(ByteBuffer) of the wrong size: " + wrong);
      wrong = error(() -> model.setInput("h", xs.get(0)));
      check(wrong.contains("state input") && wrong.contains("setState"),
          "setInput on a state input says to use setState: " + wrong);
      wrong = error(() -> model.getState("nope"));
      check(wrong.contains("nope") && wrong.contains("h (next from h_new)"), "an unknown state lists them: " + wrong);

      // runAsync keeps the order of the calls: N queued steps give the N sequential steps' outputs
      model.resetState();
      model.setInput(0, xs.get(1));
      List<CompletableFuture<float[]>> queued = new ArrayList<CompletableFuture<float[]>>();
      for (int k = 0; k < n; ++k) {
        queued.add(model.runAsyncAndRead(m -> m.getOutputFloats(0)));
      }
      List<CompletableFuture<Model>> plain = new ArrayList<CompletableFuture<Model>>();
      for (int k = 0; k < 5; ++k) {
        plain.add(model.runAsync());
      }
      float[] asyncState = model.runAsyncAndRead(m -> m.getStateFloats("h")).get();
      model.resetState();
      boolean ordered = true;
      for (int k = 0; k < n; ++k) {
        ordered = ordered && Arrays.equals(step(model, xs.get(1)), queued.get(k).get());
      }
      for (int k = 0; k < 6; ++k) {
        step(model, xs.get(1));
      }
      check(ordered && plain.get(4).isDone() && Arrays.equals(model.getStateFloats("h"), asyncState),
          n + " runAsyncAndRead and 6 runAsync calls give the sequential runs' outputs and state, in order");
    }

    // an initial value from the artifact's state/0.npy, from the directory and from memory
    float[] h0 = floats(new File(work, "h0.bin"));
    try (Model model = Model.load(args[1])) {
      check(Arrays.equals(model.getStateFloats("h"), h0), "the initial state comes from state/0.npy");
      float[] first = step(model, xs.get(0));
      model.resetState();
      check(Arrays.equals(model.getStateFloats("h"), h0) && Arrays.equals(step(model, xs.get(0)), first),
          "resetState goes back to the initial value of state/0.npy");
      check(!close(first, want.get(0)), "a non-zero initial state changes the first step");
      final File dir = new File(args[1]);
      ArtifactData data = ArtifactData.read("memory", name -> (InputStream) new FileInputStream(new File(dir, name)));
      check(data.stateFiles().equals(Arrays.asList("state/0.npy")), "ArtifactData lists " + data.stateFiles());
      try (Model fromMemory = Model.load(data)) {
        check(Arrays.equals(fromMemory.getStateFloats("h"), h0) && Arrays.equals(step(fromMemory, xs.get(0)), first),
            "loaded from memory, the initial state is state/0.npy's");
      }
      byte[] manifest = Files.readAllBytes(new File(dir, "manifest.json").toPath());
      byte[] library = Files.readAllBytes(new File(dir, "model.so").toPath());
      String missing = error(() -> Model.load(ArtifactData.ofManifest("bare", manifest).library(library)).close());
      check(missing.contains("state/0.npy"), "without the initial state's bytes the load says which file: " + missing);
    }

    try (Model stateless = Model.load(args[2])) {
      check(stateless.stateCount() == 0 && stateless.inputs().size() == 4 && stateless.saveState().states().isEmpty(),
          "a model without state: all of main's inputs, no state");
    }
  }
}
