package android.os;

public final class PowerManager {
  public static final int PARTIAL_WAKE_LOCK = 1;
  /** The host's one instance (Context.getSystemService); its last wake lock, for the tests to look at. */
  public static final PowerManager HOST = new PowerManager();
  public WakeLock hostLast;

  public WakeLock newWakeLock(int levelAndFlags, String tag) {
    hostLast = new WakeLock();
    return hostLast;
  }

  public final class WakeLock {
    private boolean held;
    public void setReferenceCounted(boolean value) {}
    public void acquire() { held = true; }
    public void release() {
      if (!held) throw new RuntimeException("WakeLock under-locked");  // what Android throws
      held = false;
    }
    public boolean isHeld() { return held; }
  }
}
