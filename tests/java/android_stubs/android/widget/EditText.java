package android.widget;

public class EditText extends TextView {
  public EditText(android.content.Context context) { super(context); }
  @Override
  public android.text.Editable getText() {
    final String s = super.getText().toString();
    return new android.text.Editable() {
      public int length() { return s.length(); }
      public char charAt(int i) { return s.charAt(i); }
      public CharSequence subSequence(int start, int end) { return s.subSequence(start, end); }
      @Override
      public String toString() { return s; }
    };
  }
}
