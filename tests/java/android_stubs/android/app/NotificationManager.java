package android.app;

public class NotificationManager {
  public static final int IMPORTANCE_LOW = 2;
  /** The host's one instance (Context.getSystemService); the last notification posted, for the tests. */
  public static final NotificationManager HOST = new NotificationManager();
  public volatile Notification hostLast;

  public void createNotificationChannel(NotificationChannel channel) {}
  public void notify(int id, Notification notification) { hostLast = notification; }
}
