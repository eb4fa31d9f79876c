package android.view;

public abstract class ViewGroup extends View {
  private final java.util.List<View> children = new java.util.ArrayList<View>();
  public ViewGroup(android.content.Context context) { super(context); }
  public void addView(View child) { children.add(child); }
  public int getChildCount() { return children.size(); }
  public View getChildAt(int index) { return children.get(index); }
}
