package org.tvmgen;

import java.util.Locale;

/**
 * Milliseconds per stage, as the native runtime measures them. {@code copyIn}, {@code run} and
 * {@code copyOut} are those of the latest run; {@code load}, {@code init} and {@code firstRun}
 * happen once. Immutable: a snapshot taken by {@link Model#timings()}.
 */
public final class Timings {
  private final double loadMs;
  private final double initMs;
  private final double firstRunMs;
  private final double copyInMs;
  private final double runMs;
  private final double copyOutMs;
  private final int runs;

  /**
   * Creates a snapshot. Models create these; applications get them from {@link Model#timings()}.
   *
   * @param loadMs manifest, library and weights read
   * @param initMs VM created, inputs allocated, weights on the device
   * @param firstRunMs the first run, including one-time work (GPU kernel compilation)
   * @param copyInMs the setInput calls before the latest run
   * @param runMs the latest run
   * @param copyOutMs the getOutput calls after the latest run
   * @param runs how many times the model has run
   */
  public Timings(double loadMs, double initMs, double firstRunMs, double copyInMs, double runMs, double copyOutMs,
                 int runs) {
    this.loadMs = loadMs;
    this.initMs = initMs;
    this.firstRunMs = firstRunMs;
    this.copyInMs = copyInMs;
    this.runMs = runMs;
    this.copyOutMs = copyOutMs;
    this.runs = runs;
  }

  /**
   * Reading the manifest, the model library and the weights.
   *
   * @return milliseconds
   */
  public double loadMs() {
    return loadMs;
  }

  /**
   * Creating the VM for the device, allocating the inputs and putting the weights on the device.
   *
   * @return milliseconds
   */
  public double initMs() {
    return initMs;
  }

  /**
   * The first {@link Model#run()}, which includes one-time work such as compiling GPU kernels.
   *
   * @return milliseconds (0 before the first run)
   */
  public double firstRunMs() {
    return firstRunMs;
  }

  /**
   * The setInput calls made for the latest run.
   *
   * @return milliseconds
   */
  public double copyInMs() {
    return copyInMs;
  }

  /**
   * The latest {@link Model#run()}.
   *
   * @return milliseconds (0 before the first run)
   */
  public double runMs() {
    return runMs;
  }

  /**
   * The getOutput calls made after the latest run.
   *
   * @return milliseconds
   */
  public double copyOutMs() {
    return copyOutMs;
  }

  /**
   * How many times the model has run.
   *
   * @return the number of completed {@link Model#run()} calls
   */
  public int runs() {
    return runs;
  }

  /**
   * The timings as a JSON object, with the keys of the C++ runtime's {@code Timings::ToJson}:
   * load_ms, init_ms, first_run_ms, copy_in_ms, run_ms, copy_out_ms, runs.
   *
   * @return one line of JSON
   */
  public String toJson() {
    return new JsonObject().putFixed("load_ms", loadMs, 4).putFixed("init_ms", initMs, 4)
        .putFixed("first_run_ms", firstRunMs, 4).putFixed("copy_in_ms", copyInMs, 4).putFixed("run_ms", runMs, 4)
        .putFixed("copy_out_ms", copyOutMs, 4).put("runs", runs).toString();
  }

  /**
   * A one-line human-readable summary.
   *
   * @return e.g. {@code load 12.3 ms, init 4.5 ms, first run 8.0 ms, copy-in 0.1 ms, run 7.2 ms,
   *     copy-out 0.0 ms (3 runs)}
   */
  @Override
  public String toString() {
    return String.format(Locale.ROOT,
        "load %.3f ms, init %.3f ms, first run %.3f ms, copy-in %.3f ms, run %.3f ms, copy-out %.3f ms (%d runs)",
        loadMs, initMs, firstRunMs, copyInMs, runMs, copyOutMs, runs);
  }
}
