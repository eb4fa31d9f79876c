package org.tvmgen;

/**
 * A TVM runtime module (tvm-ffi's {@code ffi::Module}), as in tvm4j: a compiled library loaded from
 * a file, or a module a function returned (for example the Relax VM that a model library's
 * {@code vm_load_executable} creates). Its functions are looked up by name with
 * {@link #getFunction(String)}.
 *
 * <p>This is the low-level API; {@link Model} does the whole load / initialize / run sequence of a
 * {@code tvmgen compile} artifact for you. Running an artifact's library by hand on the CPU:
 *
 * <pre>{@code
 * try (Module lib = Module.load(dir + "/model.so");
 *      Function load = lib.getFunction("vm_load_executable");
 *      Module vm = (Module) load.call();
 *      Function init = vm.getFunction("vm_initialization");
 *      Function main = vm.getFunction("main");
 *      NDArray input = NDArray.empty(new long[] {1, 3, 224, 224}, "float32", Device.CPU)) {
 *   init.callVoid(Device.CPU.dlDeviceType(), 0, 2);  // device type, device id, pooled allocator
 *   input.copyFrom(pixels);
 *   try (NDArray probs = (NDArray) main.call(input)) {
 *     float[] out = probs.asFloatArray();
 *   }
 * }
 * }</pre>
 *
 * <p>A module holds a reference to the native module until {@link #close()}; functions and modules
 * obtained from it hold their own references, so they stay usable after it is closed. Methods are
 * synchronized. After {@code close()} every method but {@link #close()}, {@link #isClosed()} and
 * {@link #toString()} throws {@link IllegalStateException}.
 */
public final class Module extends NativeHandle {
  private final String origin;

  Module(long handle, String origin) {
    super(handle);
    this.origin = origin;
  }

  /**
   * Loads a compiled library (a shared object such as an artifact's {@code model.so}) with TVM's
   * {@code Module::LoadFromFile}. The library's CPU architecture is checked first, since the
   * dynamic loader's own error for a foreign library is misleading.
   *
   * @param path the library file
   * @return the loaded module; close it when done
   * @throws TvmgenException if the file cannot be read, is built for another architecture
   *     ("built for aarch64, this device is x86_64"), or TVM cannot load it
   */
  public static Module load(String path) {
    if (path == null) {
      throw new NullPointerException("path");
    }
    NativeLib.load();
    return new Module(NativeLib.moduleLoad(path), path);
  }

  /**
   * The module's own function with the given name (imported modules are not searched).
   *
   * @param name the function's name, e.g. {@code "vm_load_executable"} or {@code "main"}
   * @return the function; close it when done
   * @throws TvmgenException naming the function if the module has none of that name
   * @throws IllegalStateException if the module is closed
   */
  public Function getFunction(String name) {
    return getFunction(name, false);
  }

  /**
   * The function with the given name, optionally also searched for in the modules this one
   * imports.
   *
   * @param name the function's name
   * @param queryImports whether to search the imported modules as well
   * @return the function; close it when done
   * @throws TvmgenException naming the function if there is none of that name
   * @throws IllegalStateException if the module is closed
   */
  public synchronized Function getFunction(String name, boolean queryImports) {
    long h = checkOpen();
    if (name == null) {
      throw new NullPointerException("name");
    }
    long f = NativeLib.moduleGetFunction(h, name, queryImports);
    if (f == 0) {
      throw new TvmgenException("the module " + describe() + " has no function \"" + name + "\""
          + (queryImports ? " (imports searched too)" : ""));
    }
    return new Function(f, name);
  }

  /**
   * The kind of the module, as TVM names it: {@code "library"} for a loaded shared library,
   * {@code "relax.VirtualMachine"} for a VM, and so on.
   *
   * @return the module's kind
   * @throws IllegalStateException if the module is closed
   */
  public synchronized String kind() {
    return NativeLib.moduleKind(checkOpen());
  }

  /**
   * Where the module came from, and its kind.
   *
   * @return a one-line description
   */
  @Override
  public synchronized String toString() {
    return "Module(" + describe() + (isClosed() ? ", closed" : "") + ")";
  }

  private String describe() {
    long h = currentHandle();
    return h == 0 ? origin : origin + " (" + NativeLib.moduleKind(h) + ")";
  }

  /**
   * Drops this object's reference to the native module (the module itself is freed once nothing
   * else, such as a function obtained from it, refers to it).
   */
  @Override
  void free(long h) {
    NativeLib.moduleFree(h);
  }

  @Override
  String closedMessage() {
    return "the module " + origin + " is closed";
  }
}
