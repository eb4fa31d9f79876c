package org.tvmgen;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;

/**
 * A tensor's bytes in a direct, native-order {@link ByteBuffer}, together with its
 * {@link TensorInfo}: what {@link Model#setInput(int, Tensor)} reads and
 * {@link Model#getOutput(int, Tensor)} fills without an extra copy.
 *
 * <p>The data are the buffer's first {@link TensorInfo#byteSize()} bytes, whatever the buffer's
 * position and limit; the model never changes them. The memory is native memory outside the Java
 * heap (a direct buffer) that the runtime copies to and from the device, not device memory itself,
 * so one {@code Tensor} can serve any model with a tensor of the same size.
 *
 * <p>Not to be confused with {@link NDArray}, the low-level API's handle on a tensor the TVM
 * runtime itself allocated (possibly in device memory), which is passed to {@link Function}s.
 */
public final class Tensor {
  private final TensorInfo info;
  private final ByteBuffer buffer;

  private Tensor(TensorInfo info, ByteBuffer buffer) {
    this.info = info;
    this.buffer = buffer;
  }

  /**
   * Allocates a zero-filled tensor: {@code ByteBuffer.allocateDirect(info.byteSize())} in native
   * byte order.
   *
   * @param info the tensor's description, e.g. {@code model.inputs().get(0)}
   * @return the new tensor
   * @throws IllegalArgumentException if the tensor is larger than 2 GiB (a ByteBuffer's limit)
   */
  public static Tensor allocate(TensorInfo info) {
    if (info.byteSize() > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("tensor " + info + " has " + info.byteSize()
          + " bytes, more than a ByteBuffer holds");
    }
    return new Tensor(info, ByteBuffer.allocateDirect((int) info.byteSize()).order(ByteOrder.nativeOrder()));
  }

  /**
   * Wraps an existing buffer (for example one shared with a camera or another library).
   *
   * @param info the tensor's description
   * @param buffer a direct buffer of at least {@code info.byteSize()} bytes; its byte order must be
   *     the native one when elements are wider than a byte
   * @return a tensor using that buffer's memory
   * @throws IllegalArgumentException if the buffer is not direct, too small or in the wrong order
   */
  public static Tensor wrap(TensorInfo info, ByteBuffer buffer) {
    if (!buffer.isDirect()) {
      throw new IllegalArgumentException("a Tensor needs a direct ByteBuffer (ByteBuffer.allocateDirect)");
    }
    if (buffer.capacity() < info.byteSize()) {
      throw new IllegalArgumentException("tensor " + info + " takes " + info.byteSize() + " bytes, the buffer has "
          + buffer.capacity());
    }
    if (info.elementSize() > 1 && buffer.order() != ByteOrder.nativeOrder()) {
      throw new IllegalArgumentException("tensor " + info + ": the buffer must be in native byte order ("
          + ByteOrder.nativeOrder() + "): call buffer.order(ByteOrder.nativeOrder())");
    }
    return new Tensor(info, buffer);
  }

  /**
   * The tensor's description.
   *
   * @return name, shape, dtype and size
   */
  public TensorInfo info() {
    return info;
  }

  /**
   * The buffer holding the data (not a copy): write inputs into it, read outputs from it.
   *
   * @return the direct buffer, native byte order
   */
  public ByteBuffer buffer() {
    return buffer;
  }

  /**
   * The tensor's size in bytes.
   *
   * @return {@code info().byteSize()}
   */
  public long byteSize() {
    return info.byteSize();
  }

  /**
   * A float view of the data (shares the memory; its own position and limit).
   *
   * @return a FloatBuffer over the tensor's elements
   * @throws IllegalStateException if the tensor is not float32
   */
  public FloatBuffer asFloatBuffer() {
    requireFloat32();
    ByteBuffer b = buffer.duplicate().order(buffer.order());
    b.clear();
    b.limit((int) info.byteSize());
    return b.slice().order(buffer.order()).asFloatBuffer();
  }

  /**
   * Copies float values into the tensor.
   *
   * @param values exactly {@code info().elementCount()} values
   * @return this tensor
   * @throws IllegalStateException if the tensor is not float32
   * @throws IllegalArgumentException if the number of values is wrong
   */
  public Tensor copyFrom(float[] values) {
    requireFloat32();
    if (values.length != info.elementCount()) {
      throw new IllegalArgumentException("tensor " + info + " has " + info.elementCount() + " elements, "
          + values.length + " values were given");
    }
    asFloatBuffer().put(values);
    return this;
  }

  /**
   * Copies the tensor's elements into a new float array.
   *
   * @return {@code info().elementCount()} values
   * @throws IllegalStateException if the tensor is not float32
   */
  public float[] toFloatArray() {
    float[] out = new float[(int) info.elementCount()];
    asFloatBuffer().get(out);
    return out;
  }

  /**
   * Copies the tensor's bytes (native byte order, any dtype) into a new array.
   *
   * @return {@code byteSize()} bytes
   */
  public byte[] toByteArray() {
    byte[] out = new byte[(int) info.byteSize()];
    ByteBuffer b = buffer.duplicate();
    b.clear();
    b.get(out);
    return out;
  }

  /**
   * Copies bytes (native byte order, any dtype) into the tensor.
   *
   * @param bytes exactly {@code byteSize()} bytes
   * @return this tensor
   * @throws IllegalArgumentException if the number of bytes is wrong
   */
  public Tensor copyFrom(byte[] bytes) {
    if (bytes.length != info.byteSize()) {
      throw new IllegalArgumentException("tensor " + info + " takes " + info.byteSize() + " bytes, "
          + bytes.length + " were given");
    }
    ByteBuffer b = buffer.duplicate();
    b.clear();
    b.put(bytes);
    return this;
  }

  private void requireFloat32() {
    if (!info.isFloat32()) {
      throw new IllegalStateException("tensor " + info + " is not float32: read or write its bytes through buffer()");
    }
  }

  /**
   * The tensor's description.
   *
   * @return e.g. {@code Tensor(input: float32[1, 3, 224, 224])}
   */
  @Override
  public String toString() {
    return "Tensor(" + info + ")";
  }
}
