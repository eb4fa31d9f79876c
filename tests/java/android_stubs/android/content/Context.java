package android.content;

import java.io.File;

/** On the host the app's directories are under {@code root} (TvmgenHostLauncher sets it). */
public abstract class Context {
  public static final String NOTIFICATION_SERVICE = "notification";
  public static final String POWER_SERVICE = "power";
  static File root = new File(System.getProperty("java.io.tmpdir"), "tvmgen-android-stub");

  public static void setRoot(File dir) { root = dir; }

  public Context getApplicationContext() { return this; }
  public File getFilesDir() { return dir("files"); }
  public File getCacheDir() { return dir("cache"); }
  public File getExternalFilesDir(String type) { return dir("external"); }
  public android.content.res.AssetManager getAssets() { return new android.content.res.AssetManager(dir("assets")); }
  public android.content.pm.ApplicationInfo getApplicationInfo() { return new android.content.pm.ApplicationInfo(); }
  /** On the host: one NotificationManager and one PowerManager, which record what the app did with them. */
  public Object getSystemService(String name) {
    if (NOTIFICATION_SERVICE.equals(name)) return android.app.NotificationManager.HOST;
    if (POWER_SERVICE.equals(name)) return android.os.PowerManager.HOST;
    throw new UnsupportedOperationException(name);
  }
  public final <T> T getSystemService(Class<T> serviceClass) { throw new UnsupportedOperationException(serviceClass.getName()); }
  public int checkSelfPermission(String permission) { return android.content.pm.PackageManager.PERMISSION_GRANTED; }
  public ComponentName startService(Intent service) { throw new UnsupportedOperationException(); }
  public ComponentName startForegroundService(Intent service) { throw new UnsupportedOperationException(); }
  public boolean stopService(Intent service) { throw new UnsupportedOperationException(); }

  private static File dir(String name) {
    File d = new File(root, name);
    d.mkdirs();
    return d;
  }
}
