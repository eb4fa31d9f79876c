package android.content.pm;

public class ServiceInfo {
  public static final int FOREGROUND_SERVICE_TYPE_SPECIAL_USE = 0x40000000;
}
