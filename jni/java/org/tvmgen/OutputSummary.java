package org.tvmgen;

import java.util.Arrays;

/**
 * What a results file keeps of a float32 output so the host can check it against its reference:
 * min, max and mean, the top-5 classes and their values (for an output shaped like a classifier's,
 * {@code [1, N]} or {@code [N]}), and every value when there are at most {@link #MAX_VALUES}.
 */
public final class OutputSummary {
  /** Outputs up to this many elements are written whole ("values"), for the host's max error. */
  public static final int MAX_VALUES = 4096;

  private OutputSummary() {}

  /**
   * The indices of the k largest values, the largest first; ties keep the lower index first; NaNs
   * never count as large.
   *
   * @param values the values
   * @param k how many (at most values.length are returned)
   * @return the indices
   */
  public static int[] topK(float[] values, int k) {
    int n = Math.min(k, values.length);
    int[] top = new int[n];
    boolean[] taken = new boolean[values.length];
    for (int i = 0; i < n; ++i) {
      int best = -1;
      for (int j = 0; j < values.length; ++j) {
        if (!taken[j] && (best < 0 || values[j] > values[best] || Float.isNaN(values[best]))) {
          best = j;
        }
      }
      taken[best] = true;
      top[i] = best;
    }
    return top;
  }

  /**
   * Whether an output is a classifier's scores: {@code [1, N]} or {@code [N]} with N above 1.
   *
   * @param info the output
   * @return true when top-5 classes mean something for it
   */
  public static boolean isClassifier(TensorInfo info) {
    long[] s = info.shape();
    return (s.length == 2 && s[0] == 1 && s[1] > 1) || (s.length == 1 && s[0] > 1);
  }

  /**
   * The summary as a JSON object: name, shape, dtype, min, max, mean (null when a value is NaN),
   * non_finite (how many values are NaN or infinite); top5 and top5_values for a
   * classifier; values when the output is small.
   *
   * @param info the output
   * @param values its elements, as {@link Model#getOutputFloats(int)} gives them
   * @return the object
   */
  public static JsonObject of(TensorInfo info, float[] values) {
    float min = Float.POSITIVE_INFINITY;
    float max = Float.NEGATIVE_INFINITY;
    double sum = 0;
    long nonFinite = 0;
    for (float v : values) {
      nonFinite += Float.isNaN(v) || Float.isInfinite(v) ? 1 : 0;
      min = Math.min(min, v);
      max = Math.max(max, v);
      sum += v;
    }
    JsonObject o = new JsonObject().put("name", info.name()).put("shape", info.shape()).put("dtype", info.dtype());
    o.put("min", values.length > 0 ? min : Double.NaN)
        .put("max", values.length > 0 ? max : Double.NaN)
        .put("mean", values.length > 0 ? sum / values.length : Double.NaN)
        .put("non_finite", nonFinite);
    if (isClassifier(info)) {
      int[] top = topK(values, 5);
      long[] classes = new long[top.length];
      float[] scores = new float[top.length];
      for (int i = 0; i < top.length; ++i) {
        classes[i] = top[i];
        scores[i] = values[top[i]];
      }
      o.put("top5", classes).put("top5_values", scores);
    }
    if (values.length <= MAX_VALUES) {
      o.put("values", Arrays.copyOf(values, values.length));
    }
    return o;
  }
}
