import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ExecutorService;
import org.tvmgen.Model;

/**
 * Model.runAsync on the real JNI path: the runs happen on the model's own thread, give the same
 * outputs as run(), queue one after another, and close() stops them. Prints one "ok ..." line per
 * check; any failure exits non-zero with the reason.
 */
public final class AsyncCheck {
  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
    System.out.println("ok " + what);
  }

  public static void main(String[] args) throws Exception {
    Model model = Model.load(args[0], 1, Model.AFFINITY_ANY);
    int n = (int) (model.inputs().get(0).byteSize() / 4);
    float[] x = new float[n];
    for (int i = 0; i < n; ++i) {
      x[i] = (float) Math.sin(i * 0.37);
    }
    model.setInput(0, x);
    model.run();
    float[] expected = model.getOutputFloats(0);

    String caller = Thread.currentThread().getName();
    check(Arrays.equals(model.runAsync().get().getOutputFloats(0), expected), "runAsync gives run()'s outputs");
    // (a thenApply on a future already done runs on the caller: the thread is read inside the run instead)
    String runOn = model.runAsyncAndRead(m -> Thread.currentThread().getName()).get();
    check(runOn.startsWith("tvmgen-run-") && !runOn.equals(caller), "runAsync ran on " + runOn);

    check(Arrays.equals(model.runAsyncAndRead(m -> m.getOutputFloats(0)).get(), expected),
        "runAsyncAndRead gives run()'s outputs");

    ExecutorService mine = Executors.newFixedThreadPool(2);
    check(Arrays.equals(model.runAsync(mine).get().getOutputFloats(0), expected), "runAsync(executor)");
    mine.shutdown();

    // eight runs queued at once: one thread, in order
    List<CompletableFuture<Integer>> queued = new ArrayList<CompletableFuture<Integer>>();
    final int[] order = {0};
    for (int i = 0; i < 8; ++i) {
      final int k = i;
      queued.add(model.runAsyncAndRead(m -> {
        if (order[0] != k) {
          throw new IllegalStateException("run " + k + " ran as number " + order[0]);
        }
        return order[0]++;
      }));
    }
    CompletableFuture.allOf(queued.toArray(new CompletableFuture[0])).get();
    check(order[0] == 8, "8 queued runs ran one after another, in order");

    // a run's error arrives through the future
    float[] wrong = new float[n + 1];
    try {
      model.runAsyncAndRead(m -> {
        m.setInput(0, wrong);
        return 0;
      }).get();
      check(false, "a wrong input size fails the future");
    } catch (ExecutionException e) {
      check(e.getCause() instanceof org.tvmgen.TvmgenException, "a run's error fails its future: " + e.getCause());
    }

    // close() waits for the run in progress; runs still queued then fail; new ones are refused
    List<CompletableFuture<Model>> late = new ArrayList<CompletableFuture<Model>>();
    for (int i = 0; i < 20; ++i) {
      late.add(model.runAsync());
    }
    model.close();
    int done = 0;
    int refused = 0;
    for (CompletableFuture<Model> f : late) {
      try {
        f.get();
        done++;
      } catch (ExecutionException e) {
        if (!(e.getCause() instanceof IllegalStateException)) {
          throw e;
        }
        refused++;
      }
    }
    check(done + refused == 20 && refused > 0, "after close: " + done + " queued runs finished, " + refused
        + " failed with IllegalStateException");
    try {
      model.runAsync();
      check(false, "runAsync after close throws");
    } catch (IllegalStateException e) {
      check(true, "runAsync after close throws IllegalStateException");
    }
  }
}
