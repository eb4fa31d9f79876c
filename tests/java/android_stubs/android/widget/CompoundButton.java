package android.widget;

public abstract class CompoundButton extends Button {
  private boolean checked;
  public CompoundButton(android.content.Context context) { super(context); }
  public void setChecked(boolean value) { checked = value; }
  public boolean isChecked() { return checked; }
}
