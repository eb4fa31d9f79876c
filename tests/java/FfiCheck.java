import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.tvmgen.Device;
import org.tvmgen.Function;
import org.tvmgen.Module;
import org.tvmgen.NDArray;

/**
 * Test harness for tests/runtime/test_java_ffi.py: the low-level tvm4j-style API (Module, Function, NDArray).
 *
 * <pre>
 * java -cp tvmgen.jar:CLASSES FfiCheck run LIBRARY OUT_DIR FILE:DIMxDIM... ...
 *   Runs an artifact's library by hand on the CPU (vm_load_executable, vm_initialization(1, 0, 2),
 *   main) with float32 inputs read from FILE (shape DIMxDIM...); writes float_K.bin (asFloatArray)
 *   and buffer_K.bin (copyTo(ByteBuffer)) per output, and info.txt.
 * java -cp tvmgen.jar:CLASSES FfiCheck checks LIBRARY FOREIGN_LIBRARY OUT_DIR
 *   Error cases and conversions; writes results.tsv (check, class or "none", message or value).
 * </pre>
 */
public final class FfiCheck {
  private static PrintWriter results;

  interface Check {
    Object run() throws Exception;
  }

  public static void main(String[] args) throws Exception {
    if (args[0].equals("run")) {
      run(args[1], new File(args[2]), Arrays.copyOfRange(args, 3, args.length));
    } else {
      checks(args[1], args[2], new File(args[3]));
    }
  }

  // ------------------------------------------------------------------ run

  static void run(String library, File out, String[] inputSpecs) throws IOException {
    out.mkdirs();
    List<NDArray> inputs = new ArrayList<NDArray>();
    try (Module lib = Module.load(library);
         Function loadExecutable = lib.getFunction("vm_load_executable");
         Module vm = (Module) loadExecutable.call();
         Function init = vm.getFunction("vm_initialization");
         Function main = vm.getFunction("main");
         PrintWriter info = new PrintWriter(new File(out, "info.txt"), "UTF-8")) {
      init.callVoid(Device.CPU.dlDeviceType(), 0, 2);  // device type, id, pooled allocator
      info.println("lib\t" + lib.kind());
      info.println("vm\t" + vm.kind());
      for (int i = 0; i < inputSpecs.length; ++i) {
        String[] parts = inputSpecs[i].split(":");
        String[] dims = parts[1].split("x");
        long[] shape = new long[dims.length];
        for (int d = 0; d < dims.length; ++d) {
          shape[d] = Long.parseLong(dims[d]);
        }
        NDArray x = NDArray.empty(shape, "float32", Device.CPU, 0);
        inputs.add(x);
        byte[] bytes = Files.readAllBytes(new File(parts[0]).toPath());
        if (i % 2 == 0) {  // both copy paths: a float[] and a direct ByteBuffer
          float[] values = new float[bytes.length / 4];
          ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(values);
          x.copyFrom(values);
        } else {
          ByteBuffer buf = ByteBuffer.allocateDirect(bytes.length).order(ByteOrder.nativeOrder());
          buf.put(bytes).flip();
          x.copyFrom(buf);
        }
      }
      Object result = main.call(inputs.toArray());
      Object[] outputs = result instanceof Object[] ? (Object[]) result : new Object[] {result};
      info.println("result\t" + (result instanceof Object[] ? "Object[]" : result.getClass().getName()));
      for (int k = 0; k < outputs.length; ++k) {
        try (NDArray y = (NDArray) outputs[k]) {
          info.println("output\t" + y.dtype() + "\t" + join(y.shape()) + "\t" + y.device().deviceName() + ":"
              + y.deviceId() + "\t" + y.byteSize());
          write(new File(out, "float_" + k + ".bin"), y.asFloatArray());
          ByteBuffer buf = ByteBuffer.allocateDirect((int) y.byteSize()).order(ByteOrder.nativeOrder());
          y.copyTo(buf);
          byte[] bytes = new byte[buf.capacity()];
          buf.get(bytes);
          try (OutputStream os = new FileOutputStream(new File(out, "buffer_" + k + ".bin"))) {
            os.write(bytes);
          }
        }
      }
    } finally {
      for (NDArray x : inputs) {
        x.close();
      }
    }
  }

  // ------------------------------------------------------------------ checks

  static void checks(String library, String foreignLibrary, File out) throws Exception {
    out.mkdirs();
    results = new PrintWriter(new File(out, "results.tsv"), "UTF-8");
    final Module lib = Module.load(library);

    check("num_threads", () -> {
      try (Function f = Function.getGlobal("runtime.NumThreads")) {
        Object n = f.call();
        return n.getClass().getName() + " " + n + " " + f.callLong();
      }
    });
    check("unknown_global", () -> Function.getGlobal("tvmgen.no_such_function"));
    check("unknown_module_function", () -> lib.getFunction("no_such_function"));
    check("unknown_module_function_imports", () -> lib.getFunction("no_such_function", true));
    check("foreign_library", () -> Module.load(foreignLibrary));
    check("missing_library", () -> Module.load(new File(out, "missing.so").getPath()));

    // conversions, through tvm-ffi's own global functions
    check("string_roundtrip", () -> {
      try (Function f = Function.getGlobal("ffi.String")) {
        return f.call("h\u00e9llo \u2713 \ud83d\ude00");
      }
    });
    check("shape_result", () -> {
      try (Function f = Function.getGlobal("ffi.Shape")) {
        return join((long[]) f.call(2, 3L, 4));
      }
    });
    check("array_result", () -> {
      try (Function f = Function.getGlobal("ffi.Array");
           NDArray x = NDArray.empty(new long[] {2, 3}, "float32")) {
        Object[] items = (Object[]) f.call(7, 2.5, "s", true, null, new long[] {5, 6}, x, f, lib);
        StringBuilder sb = new StringBuilder();
        for (Object o : items) {
          sb.append(o == null ? "null" : o.getClass().getSimpleName() + "=" + (o instanceof long[]
              ? join((long[]) o) : o instanceof NDArray || o instanceof Function ? o : o instanceof Module
              ? ((Module) o).kind() : o)).append(' ');
          if (o instanceof AutoCloseable) {
            ((AutoCloseable) o).close();
          }
        }
        return sb.toString().trim();
      }
    });
    check("unsupported_result", () -> {
      try (Function f = Function.getGlobal("ffi.Map")) {
        return f.call("a", 1);
      }
    });
    check("call_void_unsupported_result", () -> {
      try (Function f = Function.getGlobal("ffi.Map")) {
        f.callVoid("a", 1);
        return "ok";
      }
    });
    check("unsupported_argument", () -> {
      try (Function f = Function.getGlobal("ffi.Array")) {
        return f.call(new Object());
      }
    });
    check("call_error", () -> {
      try (Function f = Function.getGlobal("runtime.TVMTensorAllocWithScope")) {
        return f.call("not a shape");
      }
    });

    // NDArray
    check("ndarray_roundtrip", () -> {
      try (NDArray x = NDArray.empty(new long[] {2, 3}, "float32", Device.CPU)) {
        x.copyFrom(new float[] {1, 2, 3, 4, 5, 6});
        ByteBuffer b = ByteBuffer.allocateDirect(24).order(ByteOrder.nativeOrder());
        x.copyTo(b);
        float[] viaBuffer = new float[6];
        b.asFloatBuffer().get(viaBuffer);
        b.asFloatBuffer().put(new float[] {6, 5, 4, 3, 2, 1});
        x.copyFrom(b);
        return x + " " + join(x.shape()) + " " + x.dtype() + " " + x.device() + " " + x.deviceType() + " "
            + x.deviceId() + " " + x.byteSize() + " " + x.elementCount() + " " + Arrays.toString(viaBuffer) + " "
            + Arrays.toString(x.asFloatArray());
      }
    });
    check("ndarray_int64", () -> {
      try (NDArray x = NDArray.empty(new long[] {3}, "int64")) {
        x.copyFrom(new long[] {-1, 1L << 40, 7});
        long[] back = new long[3];
        x.copyTo(back);
        return Arrays.toString(back);
      }
    });
    check("ndarray_wrong_size", () -> {
      try (NDArray x = NDArray.empty(new long[] {2, 3}, "float32")) {
        return x.copyFrom(new float[5]);
      }
    });
    check("ndarray_wrong_size_out", () -> {
      try (NDArray x = NDArray.empty(new long[] {2, 3}, "float32")) {
        x.copyTo(ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder()));
        return "ok";
      }
    });
    check("ndarray_wrong_dtype", () -> {
      try (NDArray x = NDArray.empty(new long[] {3}, "int64")) {
        return x.copyFrom(new float[3]);
      }
    });
    check("ndarray_heap_buffer", () -> {
      try (NDArray x = NDArray.empty(new long[] {2}, "float32")) {
        return x.copyFrom(ByteBuffer.allocate(8));
      }
    });
    check("ndarray_bad_dtype", () -> NDArray.empty(new long[] {2}, "floaty13"));

    // use after close
    final NDArray closedArray = NDArray.empty(new long[] {2}, "float32");
    closedArray.close();
    closedArray.close();  // twice: nothing
    check("closed_ndarray_copy", () -> closedArray.copyFrom(new float[2]));
    check("closed_ndarray_shape", () -> closedArray.shape());
    check("closed_ndarray_argument", () -> {
      try (Function f = Function.getGlobal("ffi.Array")) {
        return f.call(closedArray);
      }
    });
    final Function closedFunction = Function.getGlobal("runtime.NumThreads");
    closedFunction.close();
    check("closed_function_call", () -> closedFunction.call());
    final Module closedModule = Module.load(library);
    final Function survivor = closedModule.getFunction("vm_load_executable");
    closedModule.close();
    check("closed_module_get_function", () -> closedModule.getFunction("vm_load_executable"));
    check("closed_module_kind", () -> closedModule.kind());
    check("closed_is_closed", () -> closedModule.isClosed() + " " + closedFunction.isClosed() + " "
        + closedArray.isClosed() + " " + closedModule + " " + closedFunction + " " + closedArray);
    check("function_outlives_module", () -> {  // the function keeps the library alive
      try (Module vm = (Module) survivor.call()) {
        return vm.kind();
      } finally {
        survivor.close();
      }
    });
    lib.close();
    results.close();
  }

  static void check(String name, Check body) {
    String cls = "none";
    String msg;
    try {
      Object r = body.run();
      msg = String.valueOf(r);
      if (r instanceof AutoCloseable) {
        ((AutoCloseable) r).close();
      }
    } catch (Exception e) {
      cls = e.getClass().getName();
      msg = String.valueOf(e.getMessage());
    }
    results.println(name + "\t" + cls + "\t" + msg.replace('\n', ' ').replace('\t', ' '));
  }

  static String join(long[] shape) {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < shape.length; ++i) {
      sb.append(i == 0 ? "" : "x").append(shape[i]);
    }
    return sb.toString();
  }

  static void write(File f, float[] values) throws IOException {
    ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    b.asFloatBuffer().put(values);
    try (OutputStream os = new FileOutputStream(f)) {
      os.write(b.array());
    }
  }
}
