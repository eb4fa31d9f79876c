package org.tvmgen;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * A TVM tensor (tvm-ffi's {@code ffi::Tensor}), as tvm4j's {@code NDArray}: memory the TVM runtime
 * allocated on a device (the CPU, or a GPU through OpenCL, CUDA, ...), passed to and returned by
 * {@link Function#call(Object...)}.
 *
 * <p>Unlike {@link Tensor}, which is a host-side direct {@link ByteBuffer} that {@link Model}
 * copies from and to, an {@code NDArray} is the runtime's own tensor, possibly in device memory
 * that Java (and this library) never touches directly: data move in and out only through the
 * runtime's {@code TVMTensorCopyFromBytes} / {@code TVMTensorCopyToBytes}, with the
 * {@code copyFrom} / {@code copyTo} methods here. Copies take exactly the tensor's
 * {@link #byteSize()} bytes, row-major, in native byte order.
 *
 * <pre>{@code
 * try (NDArray x = NDArray.empty(new long[] {2, 3}, "float32", Device.CPU)) {
 *   x.copyFrom(new float[] {1, 2, 3, 4, 5, 6});
 *   float[] back = x.asFloatArray();
 * }
 * }</pre>
 *
 * <p>The shape, dtype and device are fixed. An {@code NDArray} holds a reference to the native
 * tensor until {@link #close()} (the memory is freed once nothing else, such as a VM, refers to it).
 * Methods are synchronized; after {@code close()} every method but {@code close()},
 * {@link #isClosed()} and {@link #toString()} throws {@link IllegalStateException}.
 */
public final class NDArray extends NativeHandle {
  private final long[] shape;
  private final String dtype;
  private final int deviceType;
  private final int deviceId;
  private final long byteSize;

  NDArray(long handle) {
    super(handle);
    try {
      this.shape = NativeLib.ndarrayShape(handle);
      this.dtype = NativeLib.ndarrayDtype(handle);
      long dev = NativeLib.ndarrayDevice(handle);
      this.deviceType = (int) (dev >> 32);
      this.deviceId = (int) dev;
      this.byteSize = NativeLib.ndarrayByteSize(handle);
    } catch (RuntimeException | Error e) {
      NativeLib.ndarrayFree(handle);
      throw e;
    }
  }

  /**
   * Allocates an uninitialized tensor on the CPU.
   *
   * @param shape the dimensions
   * @param dtype the element type: float32, float16, int64, int32, int8, uint8, bool, ...
   * @return the tensor; close it when done
   * @throws TvmgenException if the dtype is unknown or the allocation fails
   */
  public static NDArray empty(long[] shape, String dtype) {
    return empty(shape, dtype, Device.CPU, 0);
  }

  /**
   * Allocates an uninitialized tensor on device 0 of a kind.
   *
   * @param shape the dimensions
   * @param dtype the element type: float32, float16, int64, int32, int8, uint8, bool, ...
   * @param device where the memory lives
   * @return the tensor; close it when done
   * @throws TvmgenException if the dtype is unknown, the runtime lacks the device, or the
   *     allocation fails
   */
  public static NDArray empty(long[] shape, String dtype, Device device) {
    return empty(shape, dtype, device, 0);
  }

  /**
   * Allocates an uninitialized tensor on a device ({@code runtime.TVMTensorAllocWithScope}). For a
   * GPU the runtime's backend library (e.g. libtvm_runtime_opencl.so) is loaded if needed.
   *
   * @param shape the dimensions (each &gt;= 0)
   * @param dtype the element type: float32, float16, int64, int32, int8, uint8, bool, ...
   * @param device the kind of device
   * @param deviceId which device of that kind, from 0
   * @return the tensor; close it when done
   * @throws TvmgenException if the dtype is unknown, the runtime lacks the device, or the
   *     allocation fails
   */
  public static NDArray empty(long[] shape, String dtype, Device device, int deviceId) {
    if (shape == null || dtype == null || device == null) {
      throw new NullPointerException(shape == null ? "shape" : dtype == null ? "dtype" : "device");
    }
    NativeLib.load();
    return new NDArray(NativeLib.ndarrayEmpty(shape.clone(), dtype, device.dlDeviceType(), deviceId, device.deviceName()));
  }

  // ------------------------------------------------------------------ description

  /**
   * The tensor's dimensions.
   *
   * @return a copy of the shape
   * @throws IllegalStateException if the tensor is closed
   */
  public long[] shape() {
    checkOpen();
    return shape.clone();
  }

  /**
   * The element type, as TVM spells it.
   *
   * @return float32, float16, int64, int32, uint8, bool, ...
   * @throws IllegalStateException if the tensor is closed
   */
  public String dtype() {
    checkOpen();
    return dtype;
  }

  /**
   * The kind of device the tensor's memory is on.
   *
   * @return CPU, CUDA, OPENCL, VULKAN or METAL
   * @throws IllegalStateException if the tensor is closed
   * @throws TvmgenException if it is a kind {@link Device} does not list (see
   *     {@link #deviceType()})
   */
  public Device device() {
    checkOpen();
    try {
      return Device.fromDlDeviceType(deviceType);
    } catch (IllegalArgumentException e) {
      throw new TvmgenException("the NDArray is on DLPack device type " + deviceType + ", which Device does not list");
    }
  }

  /**
   * The DLPack device type code of the tensor's device ({@code DLDeviceType} in dlpack.h).
   *
   * @return e.g. 1 for the CPU, 4 for OpenCL
   * @throws IllegalStateException if the tensor is closed
   */
  public int deviceType() {
    checkOpen();
    return deviceType;
  }

  /**
   * Which device of its kind the tensor is on.
   *
   * @return the device id, from 0
   * @throws IllegalStateException if the tensor is closed
   */
  public int deviceId() {
    checkOpen();
    return deviceId;
  }

  /**
   * The number of elements: the product of the dimensions.
   *
   * @return the element count
   * @throws IllegalStateException if the tensor is closed
   */
  public long elementCount() {
    checkOpen();
    long n = 1;
    for (long d : shape) {
      n *= d;
    }
    return n;
  }

  /**
   * The tensor's size in bytes: what the copy methods take and give.
   *
   * @return the size in bytes
   * @throws IllegalStateException if the tensor is closed
   */
  public long byteSize() {
    checkOpen();
    return byteSize;
  }

  // ------------------------------------------------------------------ copies in

  /**
   * Copies float values into a float32 tensor.
   *
   * @param values exactly {@link #elementCount()} values, row-major
   * @return this tensor
   * @throws TvmgenException if the tensor is not float32, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized NDArray copyFrom(float[] values) {
    copyArray(values, true, 4, "float[]", "float32");
    return this;
  }

  /**
   * Copies double values into a float64 tensor.
   *
   * @param values exactly {@link #elementCount()} values, row-major
   * @return this tensor
   * @throws TvmgenException if the tensor is not float64, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized NDArray copyFrom(double[] values) {
    copyArray(values, true, 8, "double[]", "float64");
    return this;
  }

  /**
   * Copies int values into an int32 or uint32 tensor.
   *
   * @param values exactly {@link #elementCount()} values, row-major
   * @return this tensor
   * @throws TvmgenException if the tensor has another dtype, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized NDArray copyFrom(int[] values) {
    copyArray(values, true, 4, "int[]", "int32", "uint32");
    return this;
  }

  /**
   * Copies long values into an int64 or uint64 tensor.
   *
   * @param values exactly {@link #elementCount()} values, row-major
   * @return this tensor
   * @throws TvmgenException if the tensor has another dtype, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized NDArray copyFrom(long[] values) {
    copyArray(values, true, 8, "long[]", "int64", "uint64");
    return this;
  }

  /**
   * Copies a tensor's raw bytes, whatever its dtype.
   *
   * @param bytes exactly {@link #byteSize()} bytes, native byte order
   * @return this tensor
   * @throws TvmgenException if the size is wrong or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized NDArray copyFrom(byte[] bytes) {
    copyArray(bytes, true, 1, "byte[]");
    return this;
  }

  /**
   * Copies the bytes between a direct buffer's position and limit (exactly {@link #byteSize()}
   * bytes, native byte order) straight from its memory. The buffer's position is not changed.
   *
   * @param data a direct buffer, in native order when elements are wider than a byte
   * @return this tensor
   * @throws IllegalArgumentException if the buffer is not direct or not in native byte order
   * @throws TvmgenException if the size is wrong or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized NDArray copyFrom(ByteBuffer data) {
    long h = checkOpen();
    checkBuffer(data, "copyFrom");
    NativeLib.ndarrayCopyFromBuffer(h, data, data.position(), data.remaining());
    return this;
  }

  // ------------------------------------------------------------------ copies out

  /**
   * Copies a float32 tensor's values into an array.
   *
   * @param out exactly {@link #elementCount()} floats
   * @throws TvmgenException if the tensor is not float32, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized void copyTo(float[] out) {
    copyArray(out, false, 4, "float[]", "float32");
  }

  /**
   * Copies a float64 tensor's values into an array.
   *
   * @param out exactly {@link #elementCount()} doubles
   * @throws TvmgenException if the tensor is not float64, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized void copyTo(double[] out) {
    copyArray(out, false, 8, "double[]", "float64");
  }

  /**
   * Copies an int32 or uint32 tensor's values into an array.
   *
   * @param out exactly {@link #elementCount()} ints
   * @throws TvmgenException if the tensor has another dtype, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized void copyTo(int[] out) {
    copyArray(out, false, 4, "int[]", "int32", "uint32");
  }

  /**
   * Copies an int64 or uint64 tensor's values into an array.
   *
   * @param out exactly {@link #elementCount()} longs
   * @throws TvmgenException if the tensor has another dtype, the count is wrong, or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized void copyTo(long[] out) {
    copyArray(out, false, 8, "long[]", "int64", "uint64");
  }

  /**
   * Copies the tensor's raw bytes, whatever its dtype.
   *
   * @param out exactly {@link #byteSize()} bytes, filled in native byte order
   * @throws TvmgenException if the size is wrong or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized void copyTo(byte[] out) {
    copyArray(out, false, 1, "byte[]");
  }

  /**
   * Copies the tensor's {@link #byteSize()} bytes straight into a direct buffer's memory, from its
   * position (at least that many bytes must remain). The buffer's position is not changed.
   *
   * @param out a direct, writable buffer, in native order when elements are wider than a byte
   * @throws IllegalArgumentException if the buffer is not direct, read-only or not in native order
   * @throws TvmgenException if the buffer is too small or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized void copyTo(ByteBuffer out) {
    long h = checkOpen();
    checkBuffer(out, "copyTo");
    if (out.isReadOnly()) {
      throw new IllegalArgumentException("NDArray.copyTo: the buffer is read-only");
    }
    int n = out.remaining();
    if (byteSize <= n) {
      n = (int) byteSize;
    }
    NativeLib.ndarrayCopyToBuffer(h, out, out.position(), n);
  }

  /**
   * Copies a float32 tensor's values into a new array.
   *
   * @return {@link #elementCount()} values, row-major
   * @throws TvmgenException if the tensor is not float32 or the copy fails
   * @throws IllegalStateException if the tensor is closed
   */
  public synchronized float[] asFloatArray() {
    checkOpen();
    requireDtype("float[]", "float32");
    long n = elementCount();
    if (n > Integer.MAX_VALUE) {
      throw new TvmgenException("the NDArray has " + n + " elements, more than a Java array holds");
    }
    float[] out = new float[(int) n];
    copyTo(out);
    return out;
  }

  // ------------------------------------------------------------------ lifetime

  /**
   * The tensor's dtype, shape and device.
   *
   * @return e.g. {@code NDArray(float32[1, 1000], cpu:0)}
   */
  @Override
  public String toString() {
    String dev;
    try {
      dev = Device.fromDlDeviceType(deviceType).deviceName();
    } catch (IllegalArgumentException e) {
      dev = "device" + deviceType;
    }
    return "NDArray(" + dtype + Arrays.toString(shape) + ", " + dev + ":" + deviceId + (isClosed() ? ", closed" : "")
        + ")";
  }

  /**
   * Drops this object's reference to the native tensor (its memory is freed once nothing else
   * refers to it).
   */
  @Override
  void free(long h) {
    NativeLib.ndarrayFree(h);
  }

  @Override
  String closedMessage() {
    return "the NDArray " + dtype + Arrays.toString(shape) + " is closed";
  }

  private void copyArray(Object array, boolean in, int elementBytes, String what, String... dtypes) {
    long h = checkOpen();
    if (array == null) {
      throw new NullPointerException(in ? "values" : "out");
    }
    requireDtype(what, dtypes);
    if (in) {
      NativeLib.ndarrayCopyFromArray(h, array, elementBytes);
    } else {
      NativeLib.ndarrayCopyToArray(h, array, elementBytes);
    }
  }

  private void requireDtype(String what, String... dtypes) {
    if (dtypes.length == 0) {
      return;
    }
    for (String d : dtypes) {
      if (d.equals(dtype)) {
        return;
      }
    }
    throw new TvmgenException("the NDArray is " + dtype + ", a " + what + " holds " + String.join(" or ", dtypes)
        + ": copy its bytes through a byte[] or a direct ByteBuffer instead");
  }

  private void checkBuffer(ByteBuffer buf, String what) {
    if (buf == null) {
      throw new NullPointerException("buffer");
    }
    if (!buf.isDirect()) {
      throw new IllegalArgumentException("NDArray." + what + ": the ByteBuffer must be direct "
          + "(ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder())); for heap data use the array methods");
    }
    long count = 1;
    for (long d : shape) {
      count *= d;
    }
    if (count > 0 && byteSize / count > 1 && buf.order() != ByteOrder.nativeOrder()) {
      throw new IllegalArgumentException("NDArray." + what + " (" + dtype + "): the ByteBuffer must be in native "
          + "byte order (" + ByteOrder.nativeOrder() + "); call buffer.order(ByteOrder.nativeOrder())");
    }
  }
}
