package android.widget;

/** Keeps its text, so that the host launcher can print what the screen shows. */
public class TextView extends android.view.View {
  private final StringBuilder text = new StringBuilder();
  public TextView(android.content.Context context) { super(context); }
  public void setTextIsSelectable(boolean selectable) {}
  public final void setText(CharSequence value) { text.setLength(0); text.append(value); }
  public CharSequence getText() { return text.toString(); }
  public final void append(CharSequence value) { text.append(value); }
  public void setTextColor(int color) {}
  public void setInputType(int type) {}
  public void setError(CharSequence error) {}
}
