package android.os;

public class Build {
  public static class VERSION {
    public static final int SDK_INT = 34;
  }
  public static class VERSION_CODES {
    public static final int O = 26;
    public static final int S = 31;
    public static final int TIRAMISU = 33;
    public static final int UPSIDE_DOWN_CAKE = 34;
  }
}
