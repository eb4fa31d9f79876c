package org.tvmgen;

import java.util.Arrays;

/**
 * The timed runs of a benchmark one by one — each run's time and the copies around it — and their
 * statistics. Add the model's {@link Timings} after each timed round of {@code setInput}, {@code run}
 * and {@code getOutput}:
 *
 * <pre>{@code
 * RunStats stats = new RunStats();
 * for (int i = 0; i < iterations; i++) {
 *   model.setInput(0, pixels);
 *   model.run();
 *   model.getOutputFloats(0);
 *   stats.add(model.timings());
 * }
 * stats.writeTo(results);   // runs_ms, median_run_ms, p90_run_ms, ...
 * }</pre>
 *
 * <p>Percentiles interpolate linearly between the two nearest runs, as numpy's {@code percentile} does,
 * so the host computes the same figures from {@code runs_ms}.
 */
public final class RunStats {
  private double[] runMs = new double[16];
  private double[] copyInMs = new double[16];
  private double[] copyOutMs = new double[16];
  private int count;

  /**
   * Records the latest round: its run, and the copies in before it and out after it.
   *
   * @param t the model's timings after the round's {@code getOutput} calls
   */
  public void add(Timings t) {
    add(t.runMs(), t.copyInMs(), t.copyOutMs());
  }

  /**
   * Records one round.
   *
   * @param run the run, in milliseconds
   * @param copyIn the setInput calls before it
   * @param copyOut the getOutput calls after it
   */
  public void add(double run, double copyIn, double copyOut) {
    if (count == runMs.length) {
      runMs = Arrays.copyOf(runMs, 2 * count);
      copyInMs = Arrays.copyOf(copyInMs, 2 * count);
      copyOutMs = Arrays.copyOf(copyOutMs, 2 * count);
    }
    runMs[count] = run;
    copyInMs[count] = copyIn;
    copyOutMs[count] = copyOut;
    ++count;
  }

  /**
   * How many rounds were recorded.
   *
   * @return the count
   */
  public int count() {
    return count;
  }

  /**
   * Each run's time, in the order they ran.
   *
   * @return milliseconds (a copy)
   */
  public double[] runsMs() {
    return Arrays.copyOf(runMs, count);
  }

  /**
   * A percentile of the runs.
   *
   * @param p from 0 to 100 (50: the median)
   * @return milliseconds (NaN without runs)
   */
  public double percentile(double p) {
    return percentile(runsMs(), p);
  }

  /**
   * A percentile, interpolated linearly between the two nearest values (numpy's default).
   *
   * @param values the values, in any order (not changed)
   * @param p from 0 to 100
   * @return the percentile, NaN for no values
   * @throws IllegalArgumentException if p is outside 0..100
   */
  public static double percentile(double[] values, double p) {
    if (!(p >= 0 && p <= 100)) {
      throw new IllegalArgumentException("a percentile is between 0 and 100, not " + p);
    }
    if (values.length == 0) {
      return Double.NaN;
    }
    double[] sorted = values.clone();
    Arrays.sort(sorted);
    double rank = p / 100 * (sorted.length - 1);
    int lo = (int) Math.floor(rank);
    int hi = Math.min(lo + 1, sorted.length - 1);
    return sorted[lo] + (rank - lo) * (sorted[hi] - sorted[lo]);
  }

  /**
   * Writes the runs and their statistics into a results object: {@code runs_ms}, {@code copy_in_runs_ms},
   * {@code copy_out_runs_ms} (one per run, in order), and {@code median_run_ms}, {@code p90_run_ms},
   * {@code p99_run_ms}, {@code min_run_ms}, {@code max_run_ms}, {@code mean_run_ms}.
   *
   * @param out the object to add to
   * @return out
   */
  public JsonObject writeTo(JsonObject out) {
    double[] runs = runsMs();
    double mean = 0;
    for (double r : runs) {
      mean += r / runs.length;
    }
    return out.put("runs_ms", runs)
        .put("copy_in_runs_ms", Arrays.copyOf(copyInMs, count))
        .put("copy_out_runs_ms", Arrays.copyOf(copyOutMs, count))
        .put("median_run_ms", percentile(runs, 50))
        .put("p90_run_ms", percentile(runs, 90))
        .put("p99_run_ms", percentile(runs, 99))
        .put("min_run_ms", percentile(runs, 0))
        .put("max_run_ms", percentile(runs, 100))
        .put("mean_run_ms", count > 0 ? mean : Double.NaN);
  }
}
