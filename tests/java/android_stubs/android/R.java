package android;

public final class R {
  public static final class drawable {
    public static final int ic_menu_close_clear_cancel = 0x01080038;
    public static final int stat_sys_upload = 0x01080088;
  }
}
