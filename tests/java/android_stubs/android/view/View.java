package android.view;

public class View {
  public interface OnClickListener {
    void onClick(View v);
  }
  public View(android.content.Context context) {}
  public void setPadding(int left, int top, int right, int bottom) {}
  public void setOnClickListener(OnClickListener l) {}
}
