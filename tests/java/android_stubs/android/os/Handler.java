package android.os;

/** Runs posted work at once on the caller's thread (no delay, no queue). */
public class Handler {
  public Handler(Looper looper) {}
  public final boolean post(Runnable r) { r.run(); return true; }
  public final boolean postDelayed(Runnable r, long delayMillis) { return true; }
  public final void removeCallbacks(Runnable r) {}
}
