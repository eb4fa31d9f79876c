package org.tvmgen;

import java.nio.charset.Charset;

/**
 * A TVM packed function (tvm-ffi's {@code ffi::Function}), as in tvm4j: a global function the TVM
 * runtime registers ({@link #getGlobal(String)}), or one of a {@link Module}'s
 * ({@link Module#getFunction(String)}).
 *
 * <p>{@link #call(Object...)} converts the arguments to TVM values and the result back:
 *
 * <table border="1">
 * <caption>Value conversions</caption>
 * <tr><th>Java argument</th><th>TVM value</th><th>Java result</th></tr>
 * <tr><td>{@code null}</td><td>None</td><td>{@code null}</td></tr>
 * <tr><td>Long, Integer, Short, Byte</td><td>int (64-bit)</td><td>Long</td></tr>
 * <tr><td>Boolean</td><td>bool</td><td>Boolean</td></tr>
 * <tr><td>Double, Float</td><td>float (64-bit)</td><td>Double</td></tr>
 * <tr><td>String</td><td>str</td><td>String</td></tr>
 * <tr><td>long[]</td><td>Shape</td><td>long[]</td></tr>
 * <tr><td>{@link NDArray}</td><td>Tensor</td><td>{@link NDArray}</td></tr>
 * <tr><td>{@link Module}</td><td>Module</td><td>{@link Module}</td></tr>
 * <tr><td>{@link Function}</td><td>Function</td><td>{@link Function}</td></tr>
 * <tr><td>-</td><td>Array (e.g. a tuple of outputs)</td><td>Object[], converted item by item</td></tr>
 * </table>
 *
 * <p>Any other result (a Map, a custom object, ...) is released and reported as a
 * {@link TvmgenException} naming its TVM type key. NDArrays, Modules and Functions a call returns
 * hold native references: close them (they are independent of the function that returned them).
 *
 * <p>Methods are synchronized. An argument must not be closed by another thread while a call that
 * uses it runs. After {@link #close()} every method but {@code close()}, {@link #isClosed()} and
 * {@link #toString()} throws {@link IllegalStateException}.
 */
public final class Function extends NativeHandle {
  // Value kinds, as jni/src/jni/ffi_bridge.cc numbers them (NativeLib.functionCall, anyKind).
  private static final int KIND_NONE = 0;
  private static final int KIND_INT = 1;
  private static final int KIND_BOOL = 2;
  private static final int KIND_FLOAT = 3;
  private static final int KIND_STRING = 4;
  private static final int KIND_TENSOR = 5;
  private static final int KIND_MODULE = 6;
  private static final int KIND_FUNCTION = 7;
  private static final int KIND_ARRAY = 8;
  private static final int KIND_SHAPE = 9;

  private static final Charset UTF_8 = Charset.forName("UTF-8");

  private final String name;

  Function(long handle, String name) {
    super(handle);
    this.name = name;
  }

  /**
   * A global function registered with the TVM runtime, such as {@code "runtime.NumThreads"}.
   *
   * @param name the function's registered name
   * @return the function; close it when done
   * @throws TvmgenException naming the function if no function of that name is registered
   */
  public static Function getGlobal(String name) {
    if (name == null) {
      throw new NullPointerException("name");
    }
    NativeLib.load();
    long h = NativeLib.functionGetGlobal(name);
    if (h == 0) {
      throw new TvmgenException("the TVM runtime has no global function \"" + name + "\"");
    }
    return new Function(h, name);
  }

  /**
   * The name the function was looked up by.
   *
   * @return the global or module function name
   */
  public String name() {
    return name;
  }

  /**
   * Calls the function.
   *
   * @param args the arguments, of the types listed in the class description
   * @return the result, converted as listed in the class description; close NDArrays, Modules and
   *     Functions (also those inside an Object[]) when done
   * @throws IllegalArgumentException if an argument has a type that cannot be passed
   * @throws IllegalStateException if this function or an NDArray, Module or Function argument is
   *     closed
   * @throws TvmgenException if the call fails (with TVM's error kind and message), or it returns a
   *     value of a type that is not converted (the message names its type key)
   */
  public Object call(Object... args) {
    return invoke(args, false);
  }

  private synchronized Object invoke(Object[] args, boolean discard) {
    long h = checkOpen();
    if (args == null) {
      args = new Object[] {null};  // call((Object) null) reaches here as a null array
    }
    int n = args.length;
    int[] kinds = new int[n];
    long[] longs = new long[n];
    double[] doubles = new double[n];
    Object[] objects = new Object[n];
    for (int i = 0; i < n; ++i) {
      Object a = args[i];
      if (a == null) {
        kinds[i] = KIND_NONE;
      } else if (a instanceof Long || a instanceof Integer || a instanceof Short || a instanceof Byte) {
        kinds[i] = KIND_INT;
        longs[i] = ((Number) a).longValue();
      } else if (a instanceof Double || a instanceof Float) {
        kinds[i] = KIND_FLOAT;
        doubles[i] = ((Number) a).doubleValue();
      } else if (a instanceof Boolean) {
        kinds[i] = KIND_BOOL;
        longs[i] = ((Boolean) a) ? 1 : 0;
      } else if (a instanceof String) {
        kinds[i] = KIND_STRING;
        objects[i] = ((String) a).getBytes(UTF_8);
      } else if (a instanceof long[]) {
        kinds[i] = KIND_SHAPE;
        objects[i] = a;
      } else if (a instanceof NDArray) {
        kinds[i] = KIND_TENSOR;
        longs[i] = ((NDArray) a).checkOpen();
      } else if (a instanceof Module) {
        kinds[i] = KIND_MODULE;
        longs[i] = ((Module) a).checkOpen();
      } else if (a instanceof Function) {
        kinds[i] = KIND_FUNCTION;
        longs[i] = a == this ? h : ((Function) a).checkOpen();
      } else {
        throw new IllegalArgumentException("argument " + i + " of " + name + " is a " + a.getClass().getName()
            + ": pass null, Long, Integer, Double, Float, Boolean, String, long[], NDArray, Module or Function");
      }
    }
    long result = NativeLib.functionCall(h, kinds, longs, doubles, objects);
    try {
      return discard ? null : decode(result);
    } finally {
      NativeLib.anyFree(result);
    }
  }

  /**
   * Calls the function and discards its result (releasing any native object it returned).
   *
   * @param args the arguments, as for {@link #call(Object...)}
   * @throws IllegalArgumentException if an argument cannot be passed
   * @throws IllegalStateException if this function or an argument is closed
   * @throws TvmgenException if the call fails
   */
  public void callVoid(Object... args) {
    invoke(args, true);
  }

  /**
   * Calls a function that returns an integer (or a boolean, as 0 or 1).
   *
   * @param args the arguments, as for {@link #call(Object...)}
   * @return the result
   * @throws TvmgenException if the call fails or returns something else
   * @throws IllegalStateException if this function or an argument is closed
   */
  public long callLong(Object... args) {
    Object result = call(args);
    if (result instanceof Long) {
      return (Long) result;
    }
    if (result instanceof Boolean) {
      return ((Boolean) result) ? 1 : 0;
    }
    release(result);
    throw new TvmgenException(name + " returned " + describe(result) + ", not an integer");
  }

  /**
   * Calls a function that returns a number.
   *
   * @param args the arguments, as for {@link #call(Object...)}
   * @return the result (an integer result is converted)
   * @throws TvmgenException if the call fails or returns something else
   * @throws IllegalStateException if this function or an argument is closed
   */
  public double callDouble(Object... args) {
    Object result = call(args);
    if (result instanceof Double || result instanceof Long) {
      return ((Number) result).doubleValue();
    }
    release(result);
    throw new TvmgenException(name + " returned " + describe(result) + ", not a number");
  }

  /**
   * The function's name.
   *
   * @return e.g. {@code Function(main)}
   */
  @Override
  public synchronized String toString() {
    return "Function(" + name + (isClosed() ? ", closed" : "") + ")";
  }

  /** Drops this object's reference to the native function. */
  @Override
  void free(long h) {
    NativeLib.functionFree(h);
  }

  @Override
  String closedMessage() {
    return "the function " + name + " is closed";
  }

  // ------------------------------------------------------------------ results

  /** Converts a native result (an ffi::Any handle, which the caller frees). */
  private Object decode(long any) {
    int kind = NativeLib.anyKind(any);
    switch (kind) {
      case KIND_NONE:
        return null;
      case KIND_INT:
        return Long.valueOf(NativeLib.anyLong(any));
      case KIND_BOOL:
        return Boolean.valueOf(NativeLib.anyLong(any) != 0);
      case KIND_FLOAT:
        return Double.valueOf(NativeLib.anyDouble(any));
      case KIND_STRING:
        return new String(NativeLib.anyString(any), UTF_8);
      case KIND_SHAPE:
        return NativeLib.anyShape(any);
      case KIND_TENSOR:
        return new NDArray(NativeLib.anyObject(any));
      case KIND_MODULE:
        return new Module(NativeLib.anyObject(any), "returned by " + name);
      case KIND_FUNCTION:
        return new Function(NativeLib.anyObject(any), "returned by " + name);
      case KIND_ARRAY: {
        int n = NativeLib.anyArraySize(any);
        Object[] items = new Object[n];
        boolean ok = false;
        try {
          for (int i = 0; i < n; ++i) {
            long item = NativeLib.anyArrayItem(any, i);
            try {
              items[i] = decode(item);
            } finally {
              NativeLib.anyFree(item);
            }
          }
          ok = true;
          return items;
        } finally {
          if (!ok) {
            release(items);
          }
        }
      }
      default:
        throw new TvmgenException(name + " returned a " + NativeLib.anyTypeKey(any) + ", which Function.call does not "
            + "convert (it returns null, Long, Boolean, Double, String, long[], NDArray, Module, Function or Object[])");
    }
  }

  /** Closes the native objects in a result (also inside arrays). */
  static void release(Object result) {
    if (result instanceof AutoCloseable) {
      try {
        ((AutoCloseable) result).close();
      } catch (Exception e) {
        // NDArray, Module and Function close() throw nothing
      }
    } else if (result instanceof Object[]) {
      for (Object o : (Object[]) result) {
        release(o);
      }
    }
  }

  private static String describe(Object result) {
    return result == null ? "None" : "a " + result.getClass().getSimpleName();
  }
}
