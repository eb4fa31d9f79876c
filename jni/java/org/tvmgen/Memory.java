package org.tvmgen;

import java.util.Locale;

/**
 * The process's resident memory around a model, as {@code tvmgen-run} and {@code tvmgen bench}
 * report it (and LiteRT's benchmark splits its peak into init and overall): the resident size before
 * the model was loaded, the peak once it was loaded (library, weights on the device, VM initialised),
 * and the peak and the resident size when {@link Model#memory()} was called.
 *
 * <p>The figures are the kernel's, read by the native runtime from /proc/self/status ({@code VmRSS}
 * and its high-water mark {@code VmHWM}) on Linux and Android; they are 0 where that file does not
 * exist ({@link #isAvailable()} says false). They cover the whole process: the JVM (or the app) and
 * every model in it. Immutable: a snapshot.
 */
public final class Memory {
  private final long beforeLoadBytes;
  private final long afterLoadPeakBytes;
  private final long peakBytes;
  private final long rssBytes;

  /**
   * Creates a snapshot. Models create these; applications get them from {@link Model#memory()}.
   *
   * @param beforeLoadBytes VmRSS just before the model was loaded
   * @param afterLoadPeakBytes VmHWM just after it was loaded
   * @param peakBytes VmHWM now
   * @param rssBytes VmRSS now
   */
  public Memory(long beforeLoadBytes, long afterLoadPeakBytes, long peakBytes, long rssBytes) {
    this.beforeLoadBytes = beforeLoadBytes;
    this.afterLoadPeakBytes = afterLoadPeakBytes;
    this.peakBytes = peakBytes;
    this.rssBytes = rssBytes;
  }

  /**
   * Whether the figures were measured (false where /proc/self/status does not exist, e.g. macOS).
   *
   * @return true when the peak is known
   */
  public boolean isAvailable() {
    return peakBytes > 0;
  }

  /**
   * The process's resident size just before {@link Model#load(String)} (VmRSS).
   *
   * @return bytes
   */
  public long beforeLoadBytes() {
    return beforeLoadBytes;
  }

  /**
   * The process's peak resident size just after the model was loaded and its VM initialised (VmHWM).
   *
   * @return bytes
   */
  public long afterLoadPeakBytes() {
    return afterLoadPeakBytes;
  }

  /**
   * The process's peak resident size so far, read when the snapshot was taken (VmHWM): after the
   * runs, this is the overall peak.
   *
   * @return bytes
   */
  public long peakBytes() {
    return peakBytes;
  }

  /**
   * The process's resident size when the snapshot was taken (VmRSS).
   *
   * @return bytes
   */
  public long rssBytes() {
    return rssBytes;
  }

  /**
   * How much loading the model raised the peak above the resident size before it.
   *
   * @return {@code afterLoadPeakBytes - beforeLoadBytes}, at least 0
   */
  public long modelAfterLoadBytes() {
    return Math.max(0, afterLoadPeakBytes - beforeLoadBytes);
  }

  /**
   * How much loading and running the model raised the peak above the resident size before loading.
   *
   * @return {@code peakBytes - beforeLoadBytes}, at least 0
   */
  public long modelOverallBytes() {
    return Math.max(0, peakBytes - beforeLoadBytes);
  }

  /**
   * The figures as a JSON object with the keys of {@code tvmgen-run}'s and {@code tvmgen bench}'s
   * "memory" (source, before_load_bytes, after_load_peak_bytes, overall_peak_bytes,
   * model_after_load_bytes, model_overall_bytes) and rss_bytes.
   *
   * @return one line of JSON
   */
  public String toJson() {
    return new JsonObject().put("source", isAvailable() ? "/proc/self/status" : "unavailable")
        .put("before_load_bytes", beforeLoadBytes).put("after_load_peak_bytes", afterLoadPeakBytes)
        .put("overall_peak_bytes", peakBytes).put("rss_bytes", rssBytes)
        .put("model_after_load_bytes", modelAfterLoadBytes()).put("model_overall_bytes", modelOverallBytes())
        .toString();
  }

  /**
   * A one-line summary in megabytes.
   *
   * @return e.g. {@code peak resident memory (VmHWM): after load 61.2 MB, overall 63.0 MB (the model
   *     added 20.1 and 21.9 MB to the 41.1 MB resident before loading)}
   */
  @Override
  public String toString() {
    if (!isAvailable()) {
      return "peak memory: not available here (no /proc/self/status)";
    }
    double mb = 1024.0 * 1024.0;
    return String.format(Locale.ROOT,
        "peak resident memory (VmHWM): after load %.1f MB, overall %.1f MB (the model added %.1f and %.1f MB to "
            + "the %.1f MB resident before loading)", afterLoadPeakBytes / mb, peakBytes / mb,
        modelAfterLoadBytes() / mb, modelOverallBytes() / mb, beforeLoadBytes / mb);
  }
}
