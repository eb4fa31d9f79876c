package android.app;

public final class PendingIntent {
  public static final int FLAG_UPDATE_CURRENT = 1 << 27;
  public static final int FLAG_IMMUTABLE = 1 << 26;
  public static PendingIntent getActivity(android.content.Context context, int requestCode, android.content.Intent intent, int flags) {
    return new PendingIntent();
  }
  public static PendingIntent getService(android.content.Context context, int requestCode, android.content.Intent intent, int flags) {
    return new PendingIntent();
  }
}
