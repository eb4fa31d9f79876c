package org.tvmgen;

/**
 * The device an artifact was compiled for and runs on, with its DLPack device type code
 * ({@code DLDeviceType} in dlpack.h, the code recorded in the artifact's manifest).
 *
 * <p>The device is chosen when the model is compiled ({@code tvmgen compile --device}); a loaded
 * {@link Model} reports it through {@link Model#device()}. Whether a device can actually be used
 * depends on the TVM runtime the native library was built with.
 *
 * <p>A {@code Device} names a kind of device; where several of a kind exist, the low-level API
 * takes the device id beside it: {@link NDArray#empty(long[], String, Device, int)}, and
 * {@link NDArray#deviceId()}.
 */
public enum Device {
  /** The CPU (DLPack {@code kDLCPU} = 1). */
  CPU(1, "cpu"),
  /** An NVIDIA GPU through CUDA (DLPack {@code kDLCUDA} = 2). */
  CUDA(2, "cuda"),
  /** A GPU through OpenCL, e.g. Adreno or Mali on phones (DLPack {@code kDLOpenCL} = 4). */
  OPENCL(4, "opencl"),
  /**
   * A GPU through Vulkan compute (SPIR-V kernels run by tvmgen's own backend, libtvmgen_vulkan; DLPack
   * {@code kDLVulkan} = 7).
   */
  VULKAN(7, "vulkan"),
  /** An Apple GPU through Metal (DLPack {@code kDLMetal} = 8). */
  METAL(8, "metal");

  private final int dlDeviceType;
  private final String deviceName;

  Device(int dlDeviceType, String deviceName) {
    this.dlDeviceType = dlDeviceType;
    this.deviceName = deviceName;
  }

  /**
   * The DLPack device type code of this device.
   *
   * @return 1 (CPU), 2 (CUDA), 4 (OpenCL), 7 (Vulkan) or 8 (Metal)
   */
  public int dlDeviceType() {
    return dlDeviceType;
  }

  /**
   * The device's name as the manifest and the command line ({@code --device}) spell it.
   *
   * @return "cpu", "cuda", "opencl", "vulkan" or "metal"
   */
  public String deviceName() {
    return deviceName;
  }

  /**
   * The device with the given manifest name.
   *
   * @param name "cpu", "cuda", "opencl", "vulkan" or "metal" (case-insensitive)
   * @return the device
   * @throws IllegalArgumentException if no device has that name
   */
  public static Device fromName(String name) {
    for (Device d : values()) {
      if (d.deviceName.equalsIgnoreCase(name)) {
        return d;
      }
    }
    throw new IllegalArgumentException("unknown device \"" + name + "\": tvmgen runs on cpu, cuda, opencl, vulkan or metal");
  }

  /**
   * The device with the given DLPack device type code.
   *
   * @param dlDeviceType 1, 2, 4, 7 or 8
   * @return the device
   * @throws IllegalArgumentException for any other code
   */
  public static Device fromDlDeviceType(int dlDeviceType) {
    for (Device d : values()) {
      if (d.dlDeviceType == dlDeviceType) {
        return d;
      }
    }
    throw new IllegalArgumentException("unknown DLPack device type " + dlDeviceType);
  }

  /**
   * The manifest name of the device.
   *
   * @return the same as {@link #deviceName()}
   */
  @Override
  public String toString() {
    return deviceName;
  }
}
