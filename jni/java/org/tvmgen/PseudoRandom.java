package org.tvmgen;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The deterministic inputs of {@code tvmgen-run}, {@link RunModel} and the deploy app: a 32-bit linear
 * congruential generator (seed = seed * 1664525 + 1013904223) mapped to [-1, 1). Input k gets seed
 * {@code 42 + k}; tvmgen's Python side makes the same values ({@code tvmgen.core.model.pseudo_random}),
 * so the host can run its reference on exactly what the phone ran.
 */
public final class PseudoRandom {
  /** The seed of input 0; input k gets {@code FIRST_SEED + k}. */
  public static final int FIRST_SEED = 42;

  private PseudoRandom() {}

  /**
   * The values.
   *
   * @param count how many
   * @param seed the generator's seed
   * @return floats in [-1, 1)
   */
  public static float[] floats(int count, int seed) {
    float[] out = new float[count];
    int s = seed;
    for (int i = 0; i < count; ++i) {
      s = s * 1664525 + 1013904223;
      out[i] = (float) (s >>> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    return out;
  }

  /**
   * An input's bytes: the values for float32, zeros for other types.
   *
   * @param info the input
   * @param seed the generator's seed
   * @return a direct buffer in native order, positioned at 0
   */
  public static ByteBuffer input(TensorInfo info, int seed) {
    ByteBuffer buf = ByteBuffer.allocateDirect((int) info.byteSize()).order(ByteOrder.nativeOrder());
    if (info.isFloat32()) {
      buf.asFloatBuffer().put(floats((int) info.elementCount(), seed));
    }
    return buf;
  }
}
