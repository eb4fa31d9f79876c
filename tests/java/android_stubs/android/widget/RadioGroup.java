package android.widget;

public class RadioGroup extends LinearLayout {
  public RadioGroup(android.content.Context context) { super(context); }
}
