package android.widget;

public class ScrollView extends android.view.ViewGroup {
  public ScrollView(android.content.Context context) { super(context); }
}
