package android.app;

public class Notification {
  public static final int FOREGROUND_SERVICE_IMMEDIATE = 1;
  /** On the host: what the builder was given, for the tests to look at. */
  public String hostTitle, hostText;
  public final java.util.List<String> hostActions = new java.util.ArrayList<String>();

  public static class Builder {
    private final Notification n = new Notification();
    public Builder(android.content.Context context, String channelId) {}
    @Deprecated
    public Builder(android.content.Context context) {}
    public Builder setSmallIcon(int icon) { return this; }
    public Builder setContentTitle(CharSequence title) { n.hostTitle = String.valueOf(title); return this; }
    public Builder setContentText(CharSequence text) { n.hostText = String.valueOf(text); return this; }
    public Builder setOngoing(boolean ongoing) { return this; }
    public Builder setOnlyAlertOnce(boolean onlyAlertOnce) { return this; }
    public Builder setContentIntent(PendingIntent intent) { return this; }
    public Builder addAction(Action action) { n.hostActions.add(action.title); return this; }
    public Builder setForegroundServiceBehavior(int behavior) { return this; }
    public Notification build() { return n; }
  }

  public static class Action {
    String title;

    public static final class Builder {
      private final Action a = new Action();
      public Builder(android.graphics.drawable.Icon icon, CharSequence title, PendingIntent intent) { a.title = String.valueOf(title); }
      public Action build() { return a; }
    }
  }
}
