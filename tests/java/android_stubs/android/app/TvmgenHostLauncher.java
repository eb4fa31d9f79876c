package android.app;

import java.io.File;
import java.util.concurrent.TimeUnit;

/**
 * java android.app.TvmgenHostLauncher ROOT ACTIVITY_CLASS [start|rotate|close]: ROOT holds assets/; files/ and
 * external/ are made there. start: the activity created, then awaited until it finishes. rotate: created,
 * then at once destroyed for a configuration change and created again with saved state, as a rotation does;
 * the second one is awaited, and what its screen shows is printed after "SCREEN:". close: created, then
 * finished and destroyed (Back) at once; awaited until the results file is written.
 */
public final class TvmgenHostLauncher {
  public static void main(String[] args) throws Exception {
    File root = new File(args[0]);
    android.content.Context.setRoot(root);
    Class<?> activityClass = Class.forName(args[1]);
    String scenario = args.length > 2 ? args[2] : "start";
    Activity shown = (Activity) activityClass.getDeclaredConstructor().newInstance();
    shown.onCreate(null);
    if (scenario.equals("close")) {
      shown.finish();
      shown.onDestroy();
      File results = new File(root, "external/tvmgen-results.json");
      for (int i = 0; i < 1200 && !results.exists(); i++) Thread.sleep(100);
      Thread.sleep(500);  // written in one go: let it end
      if (!results.exists()) throw new AssertionError("no results after the activity was closed");
      return;
    }
    if (scenario.equals("rotate")) {
      shown.changingConfigurations = true;
      shown.onDestroy();
      shown = (Activity) activityClass.getDeclaredConstructor().newInstance();
      shown.onCreate(new android.os.Bundle());
    }
    if (!shown.finished.await(120, TimeUnit.SECONDS)) throw new AssertionError("the activity on screen did not finish");
    if (scenario.equals("rotate")) {
      Thread.sleep(1000);  // time for a second run, if the rotation had started one, to show itself
      System.out.println("SCREEN:\n" + text(shown.contentView));
    }
  }

  private static String text(android.view.View view) {
    if (view instanceof android.widget.TextView) return ((android.widget.TextView) view).getText().toString();
    StringBuilder out = new StringBuilder();
    if (view instanceof android.view.ViewGroup) {
      android.view.ViewGroup group = (android.view.ViewGroup) view;
      for (int i = 0; i < group.getChildCount(); i++) out.append(text(group.getChildAt(i)));
    }
    return out.toString();
  }
}
