package org.tvmgen;

import java.util.Locale;

/**
 * What {@link Model#prepare()} did: the model's GPU programs (each holding some of its kernels) built
 * by the driver or loaded from the kernel cache, and how long that took. All zero on the CPU. On Vulkan
 * a program is the model's SPIR-V module and each kernel has a pipeline of its own: {@link #built()}
 * and {@link #cached()} count pipelines there (they add up to {@link #kernels()}). Immutable.
 */
public final class PrepareStats {
  private final int programs;
  private final int kernels;
  private final int built;
  private final int cached;
  private final double ms;

  PrepareStats(int programs, int kernels, int built, int cached, double ms) {
    this.programs = programs;
    this.kernels = kernels;
    this.built = built;
    this.cached = cached;
    this.ms = ms;
  }

  /** @return the GPU programs of the model (one per OpenCL kernel module by default) */
  public int programs() {
    return programs;
  }

  /** @return the GPU kernels those programs hold */
  public int kernels() {
    return kernels;
  }

  /** @return programs (Vulkan: pipelines) compiled by the driver (then stored in the kernel cache) */
  public int built() {
    return built;
  }

  /** @return programs (Vulkan: pipelines) loaded from the kernel cache */
  public int cached() {
    return cached;
  }

  /** @return milliseconds the preparation took (waiting for builds started when the model loaded) */
  public double ms() {
    return ms;
  }

  /** @return {@code {"programs": .., "kernels": .., "built": .., "cached": .., "ms": ..}} */
  public String toJson() {
    return new JsonObject().put("programs", programs).put("kernels", kernels).put("built", built)
        .put("cached", cached).putFixed("ms", ms, 3).toString();
  }

  @Override
  public String toString() {
    return String.format(Locale.ROOT, "prepared %d kernels in %d programs (%d built, %d from the kernel cache) in %.1f ms",
        kernels, programs, built, cached, ms);
  }
}
