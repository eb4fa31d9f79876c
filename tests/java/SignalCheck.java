import org.tvmgen.Model;

/**
 * The JVM survives its own SIGSEGVs after the TVM runtime is loaded: HotSpot turns null accesses in
 * JIT-compiled code into NullPointerExceptions (and polls safepoints) through SIGSEGV, which
 * libtvm_ffi's crash handler would otherwise turn into "Segfault encountered" and an abort.
 *
 * <pre>java -cp tvmgen.jar:CLASSES SignalCheck ARTIFACT_DIR</pre>
 */
public final class SignalCheck {
  static final class Box {
    int value = 1;
  }

  static int read(Box b) {
    return b.value;  // compiled with an implicit null check: a SIGSEGV when b is null
  }

  public static void main(String[] args) {
    try (Model model = Model.load(args[0])) {
      for (int i = 0; i < model.inputs().size(); ++i) {
        model.setInput(i, model.allocateInput(i));  // zeros
      }
      model.run();
      long npes = 0;
      long sum = 0;
      Box box = new Box();
      for (int i = 0; i < 3_000_000; ++i) {
        try {
          sum += read(i % 1000 == 999 ? null : box);
        } catch (NullPointerException e) {
          npes++;
        }
        if (i % 1000 == 0) {
          sum += new byte[64 * 1024].length;  // garbage: collections, safepoints
        }
      }
      System.gc();
      model.run();  // the runtime still works too
      System.out.println("SignalCheck: ok, " + npes + " NullPointerExceptions, sum " + sum);
    }
  }
}
