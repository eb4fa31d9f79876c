package org.tvmgen;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * A per-kernel profile of a model, from {@link Model#profile(int)}: every call the Relax VM made
 * (the model's fused kernels, and the VM's own builtins such as {@code vm.builtin.alloc_tensor})
 * with its call count and time, and the whole run's time measured without the profiler.
 *
 * <p>The native runtime runs the model {@code runs} times plain and {@code runs} times with every VM
 * call timed, interleaved, on the device's clock ({@link #clock()} says which). {@link #toJson()} is
 * the runtime's JSON as it came ({@code Model::Profile} in runtime.h, the object
 * {@code tvmgen-run --profile} writes), with any keys this class does not read (on OpenCL, each
 * OpenCL kernel's own event times; on Vulkan, each kernel's timestamp times). Immutable.
 */
public final class Profile {
  private final String json;
  private final int runs;
  private final String clock;
  private final double wholeRunMs;
  private final double kernelsMedianMs;
  private final List<Entry> entries;

  /** One function the VM called: a kernel of the model or a VM builtin. Immutable. */
  public static final class Entry {
    private final String name;
    private final long calls;
    private final long totalNs;
    private final int runs;
    private final double wholeRunMs;

    Entry(String name, long calls, long totalNs, int runs, double wholeRunMs) {
      this.name = name;
      this.calls = calls;
      this.totalNs = totalNs;
      this.runs = runs;
      this.wholeRunMs = wholeRunMs;
    }

    /**
     * The function's name: a kernel's (the fused TIR function, e.g. {@code fused_conv2d_add_relu})
     * or a builtin's ({@code vm.builtin.*}, {@code runtime.*}).
     *
     * @return the name the VM called it by
     */
    public String name() {
      return name;
    }

    /**
     * Whether this is one of the VM's builtins (allocation, shape checks, ...) rather than a kernel.
     *
     * @return true for names starting with {@code vm.} or {@code runtime.}
     */
    public boolean isBuiltin() {
      return name.startsWith("vm.") || name.startsWith("runtime.");
    }

    /**
     * Calls over all the profiled runs.
     *
     * @return the call count
     */
    public long calls() {
      return calls;
    }

    /**
     * Time over all the profiled runs.
     *
     * @return milliseconds
     */
    public double totalMs() {
      return totalNs / 1e6;
    }

    /**
     * Time per run (the total divided by the number of profiled runs).
     *
     * @return milliseconds
     */
    public double perRunMs() {
      return runs > 0 ? totalMs() / runs : 0;
    }

    /**
     * Mean time per call.
     *
     * @return microseconds
     */
    public double meanUs() {
      return calls > 0 ? totalNs / 1e3 / calls : 0;
    }

    /**
     * The share of a whole run this function takes: {@link #perRunMs()} / {@link Profile#wholeRunMs()}.
     *
     * @return a fraction (0.25 for a quarter)
     */
    public double share() {
      return wholeRunMs > 0 ? perRunMs() / wholeRunMs : 0;
    }

    @Override
    public String toString() {
      return String.format(Locale.ROOT, "%s: %d calls, %.3f ms per run (%.1f%%), %.1f us per call", name, calls,
          perRunMs(), 100 * share(), meanUs());
    }
  }

  /**
   * Parses the native runtime's profile JSON. Models create these; applications get them from
   * {@link Model#profile(int)}.
   *
   * @param json the object {@code Model::Profile} returns: runs, clock, whole_run_ms, kernels_median_ms
   *     and counts {name: [calls, total_ns]}
   * @throws TvmgenException if the JSON lacks these keys
   */
  public Profile(String json) {
    Map<String, Object> root = JsonReader.asObject(new JsonReader(json, "the profile").readValue(), "the profile");
    this.json = json;
    this.runs = (int) JsonReader.number(root, "runs", "the profile");
    Object c = root.get("clock");
    this.clock = c instanceof String ? (String) c : "";
    this.wholeRunMs = JsonReader.number(root, "whole_run_ms", "the profile");
    this.kernelsMedianMs = JsonReader.number(root, "kernels_median_ms", "the profile");
    List<Entry> list = new ArrayList<Entry>();
    for (Map.Entry<String, Object> e : JsonReader.asObject(root.get("counts"), "the profile's counts").entrySet()) {
      if (!(e.getValue() instanceof List) || ((List<?>) e.getValue()).size() != 2) {
        throw new TvmgenException("the profile's count of " + e.getKey() + " is not [calls, total_ns]");
      }
      List<?> v = (List<?>) e.getValue();
      list.add(new Entry(e.getKey(), ((Double) v.get(0)).longValue(), ((Double) v.get(1)).longValue(), runs,
          wholeRunMs));
    }
    Collections.sort(list, new Comparator<Entry>() {
      @Override
      public int compare(Entry a, Entry b) {
        return a.totalNs != b.totalNs ? Long.compare(b.totalNs, a.totalNs) : a.name.compareTo(b.name);
      }
    });
    this.entries = Collections.unmodifiableList(list);
  }

  /**
   * The number of profiled runs (as many plain runs were timed for {@link #wholeRunMs()}).
   *
   * @return the {@code runs} given to {@link Model#profile(int)}
   */
  public int runs() {
    return runs;
  }

  /**
   * Which clock timed the calls, as the runtime names it: "device" (the CPU's steady clock), "device
   * (OpenCL events)" or "device (Vulkan timestamps)" (the GPU's own timestamps) or "device host" (the clock around each call
   * followed by a stream synchronisation, on other GPUs).
   *
   * @return the clock's description
   */
  public String clock() {
    return clock;
  }

  /**
   * The median of the plain (unprofiled) runs.
   *
   * @return milliseconds
   */
  public double wholeRunMs() {
    return wholeRunMs;
  }

  /**
   * The kernels' time (builtins excluded) in the median profiled run: compare with
   * {@link #wholeRunMs()} to see how much of a run the kernels account for.
   *
   * @return milliseconds
   */
  public double kernelsMedianMs() {
    return kernelsMedianMs;
  }

  /**
   * Every function the VM called, the slowest (by total time) first.
   *
   * @return an unmodifiable list
   */
  public List<Entry> entries() {
    return entries;
  }

  /**
   * The model's kernels only (no VM builtins), the slowest first.
   *
   * @return a new list
   */
  public List<Entry> kernels() {
    List<Entry> out = new ArrayList<Entry>();
    for (Entry e : entries) {
      if (!e.isBuiltin()) {
        out.add(e);
      }
    }
    return out;
  }

  /**
   * The runtime's profile JSON, unchanged.
   *
   * @return one JSON object
   */
  public String toJson() {
    return json;
  }

  /**
   * A readable table of the slowest functions.
   *
   * @param top how many rows at most
   * @return a header line and one line per function
   */
  public String table(int top) {
    StringBuilder sb = new StringBuilder(String.format(Locale.ROOT,
        "profile: %d runs (%s clock), whole run %.3f ms (median), kernels %.3f ms", runs, clock, wholeRunMs,
        kernelsMedianMs));
    for (int i = 0; i < Math.min(top, entries.size()); ++i) {
      sb.append('\n').append("  ").append(entries.get(i));
    }
    return sb.toString();
  }

  /**
   * The summary line and the ten slowest functions.
   *
   * @return {@code table(10)}
   */
  @Override
  public String toString() {
    return table(10);
  }
}
