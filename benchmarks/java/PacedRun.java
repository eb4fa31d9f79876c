import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;
import org.tvmgen.Model;
import org.tvmgen.Tensor;
import org.tvmgen.TensorInfo;

/**
 * benchmarks/speed.py --paced: the JNI path an app uses, {@code org.tvmgen.Model}, timed back to back and
 * paced (a sleep before each run, as between camera frames). A call is what an app does per frame:
 * {@code run()}, which reads every input from a direct-buffer {@link Tensor} and leaves every output in one,
 * each allocated and bound once ({@code bindInput}, {@code bindOutput}: read / written in place by the kernels
 * where they can, else copied), timed whole with {@code System.nanoTime}.
 *
 * <p>Usage: {@code PacedRun ARTIFACT THREADS WARMUP RUNS PACED_RUNS PACE_MS OUT_PREFIX INPUT.bin...} (inputs:
 * raw little-endian bytes). Prints one JSON line: the medians in ms, the thread count asked for; writes
 * the outputs of one more run, from the initial state (a streaming model starts its stream again), to OUT_PREFIX-outK.bin.
 */
public final class PacedRun {
  public static void main(String[] a) throws Exception {
    String dir = a[0];
    int threads = Integer.parseInt(a[1]);
    int warmup = Integer.parseInt(a[2]);
    int runs = Integer.parseInt(a[3]);
    int pacedRuns = Integer.parseInt(a[4]);
    long paceNs = Math.round(Double.parseDouble(a[5]) * 1e6);
    String prefix = a[6];
    try (Model m = Model.load(dir, threads, Model.AFFINITY_ANY)) {
      int nin = m.inputs().size();
      int nout = m.outputs().size();
      Tensor[] in = new Tensor[nin];
      for (int k = 0; k < nin; ++k) {
        TensorInfo info = m.inputs().get(k);
        in[k] = m.allocateInput(k).copyFrom(Files.readAllBytes(Paths.get(a[7 + k])));
        m.bindInput(k, in[k]);
      }
      Tensor[] out = new Tensor[nout];
      for (int k = 0; k < nout; ++k) {
        out[k] = m.allocateOutput(k);
        m.bindOutput(k, out[k]);
      }
      for (int r = 0; r < warmup; ++r) {
        call(m);
      }
      long[] b2b = new long[runs];
      for (int r = 0; r < runs; ++r) {
        b2b[r] = call(m);
      }
      long[] paced = new long[pacedRuns];
      for (int r = 0; r < pacedRuns; ++r) {
        long until = System.nanoTime() + paceNs;
        for (long left = paceNs; left > 0; left = until - System.nanoTime()) {
          LockSupport.parkNanos(left);  // Thread.sleep(ms, ns) rounds to whole milliseconds
        }
        paced[r] = call(m);
      }
      // the outputs of a first step: a streaming model starts its stream again, so they compare with
      // HostModel.run's first (a stateless model's are the same every run)
      StringBuilder inPlace = new StringBuilder();
      for (int k = 0; k < nout; ++k) {
        inPlace.append(k == 0 ? "" : ", ").append(m.outputWrittenInPlace(k));
      }
      StringBuilder readInPlace = new StringBuilder();
      for (int k = 0; k < nin; ++k) {
        readInPlace.append(k == 0 ? "" : ", ").append(m.inputReadInPlace(k));
      }
      m.resetState();
      call(m);
      for (int k = 0; k < nout; ++k) {
        Files.write(Paths.get(prefix + "-out" + k + ".bin"), out[k].toByteArray());
      }
      System.out.println("{\"quiet\": " + medianMs(b2b) + ", \"paced\": " + medianMs(paced) + ", \"threads\": "
          + threads + ", \"inputs_in_place\": [" + readInPlace + "], \"outputs_in_place\": [" + inPlace + "], \"java\": \"" + System.getProperty("java.version")
          + "\"}");
    }
  }

  /** One frame's call: run, the inputs read from their bound tensors, the outputs left in theirs; in ns. */
  private static long call(Model m) {
    long t0 = System.nanoTime();
    m.run();
    return System.nanoTime() - t0;
  }

  private static double medianMs(long[] ns) {
    long[] s = ns.clone();
    Arrays.sort(s);
    int n = s.length;
    double mid = n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
    return mid / 1e6;
  }
}
