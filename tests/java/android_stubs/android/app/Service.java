package android.app;

public abstract class Service extends android.content.Context {
  public static final int START_NOT_STICKY = 2;
  public static final int START_REDELIVER_INTENT = 3;
  public static final int STOP_FOREGROUND_REMOVE = 1;
  /** On the host: the foreground state the service asked for, and whether it stopped itself. */
  public volatile Notification hostForeground;
  public volatile int hostForegroundType = -1;
  public volatile boolean hostStopped;

  public void onCreate() {}
  public int onStartCommand(android.content.Intent intent, int flags, int startId) { return START_NOT_STICKY; }
  public void onDestroy() {}
  public abstract android.os.IBinder onBind(android.content.Intent intent);
  public final void startForeground(int id, Notification notification) { hostForeground = notification; hostForegroundType = 0; }
  public final void startForeground(int id, Notification notification, int foregroundServiceType) {
    hostForeground = notification;
    hostForegroundType = foregroundServiceType;
  }
  public final void stopForeground(int notificationBehavior) { hostForeground = null; }
  public final void stopSelf() { hostStopped = true; }
}
