package android.app;

import java.util.concurrent.CountDownLatch;

/** The lifecycle calls are the launcher's (TvmgenHostLauncher); runOnUiThread runs at once on the caller's thread. */
public class Activity extends android.content.Context {
  final CountDownLatch finished = new CountDownLatch(1);
  boolean changingConfigurations;
  private android.content.Intent intent = new android.content.Intent();
  android.view.View contentView;

  protected void onCreate(android.os.Bundle state) {}
  protected void onNewIntent(android.content.Intent intent) {}
  protected void onResume() {}
  protected void onPause() {}
  protected void onDestroy() {}
  public void setContentView(android.view.View view) { contentView = view; }
  public android.content.Intent getIntent() { return intent; }
  public void setIntent(android.content.Intent newIntent) { intent = newIntent; }
  public final void runOnUiThread(Runnable action) { action.run(); }
  public final void requestPermissions(String[] permissions, int requestCode) {}
  public boolean isFinishing() { return finished.getCount() == 0; }
  public boolean isChangingConfigurations() { return changingConfigurations; }
  public void finish() { finished.countDown(); }
}
