package android.graphics.drawable;

public final class Icon {
  public static Icon createWithResource(android.content.Context context, int resId) { return new Icon(); }
}
