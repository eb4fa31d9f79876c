package org.tvmgen;

import java.util.Arrays;

/**
 * An input or output of a model as its manifest describes it: name, shape, element type and size
 * in bytes. Immutable.
 */
public final class TensorInfo {
  private final String name;
  private final long[] shape;
  private final String dtype;
  private final long byteSize;

  /**
   * Creates a description. Models create these; applications normally get them from
   * {@link Model#inputs()} and {@link Model#outputs()}.
   *
   * @param name the tensor's name in the model
   * @param shape the dimensions (copied)
   * @param dtype numpy-style element type: float32, int64, uint8, bool, ...
   * @param byteSize the tensor's size in bytes
   */
  public TensorInfo(String name, long[] shape, String dtype, long byteSize) {
    this.name = name;
    this.shape = shape.clone();
    this.dtype = dtype;
    this.byteSize = byteSize;
  }

  /**
   * The tensor's name in the model.
   *
   * @return the name, as the manifest lists it
   */
  public String name() {
    return name;
  }

  /**
   * The tensor's dimensions.
   *
   * @return a copy of the shape
   */
  public long[] shape() {
    return shape.clone();
  }

  /**
   * The element type, numpy-style.
   *
   * @return float32, float16, int64, int32, uint8, bool, ...
   */
  public String dtype() {
    return dtype;
  }

  /**
   * The size of the whole tensor in bytes: what {@link Model#setInput(int, java.nio.ByteBuffer)}
   * takes and {@link Model#getOutput(int, java.nio.ByteBuffer)} writes.
   *
   * @return the size in bytes
   */
  public long byteSize() {
    return byteSize;
  }

  /**
   * The number of elements: the product of the dimensions.
   *
   * @return the element count
   */
  public long elementCount() {
    long n = 1;
    for (long d : shape) {
      n *= d;
    }
    return n;
  }

  /**
   * The size of one element in bytes.
   *
   * @return byteSize / elementCount (0 for an empty tensor)
   */
  public int elementSize() {
    long n = elementCount();
    return n == 0 ? 0 : (int) (byteSize / n);
  }

  /**
   * Whether the elements are 32-bit floats, the type the {@code float[]} methods of {@link Model}
   * take and give.
   *
   * @return true for float32
   */
  public boolean isFloat32() {
    return "float32".equals(dtype);
  }

  /**
   * The tensor as {@code name: dtype[d0, d1, ...]}.
   *
   * @return a short description
   */
  @Override
  public String toString() {
    return name + ": " + dtype + Arrays.toString(shape);
  }

  /**
   * Equal when name, shape, dtype and size are.
   *
   * @param o another object
   * @return whether it describes the same tensor
   */
  @Override
  public boolean equals(Object o) {
    if (this == o) {
      return true;
    }
    if (!(o instanceof TensorInfo)) {
      return false;
    }
    TensorInfo t = (TensorInfo) o;
    return name.equals(t.name) && Arrays.equals(shape, t.shape) && dtype.equals(t.dtype) && byteSize == t.byteSize;
  }

  /**
   * A hash of name, shape and dtype.
   *
   * @return the hash code
   */
  @Override
  public int hashCode() {
    return (name.hashCode() * 31 + Arrays.hashCode(shape)) * 31 + dtype.hashCode();
  }
}
