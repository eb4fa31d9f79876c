package android.content.pm;

public class ApplicationInfo {
  /** On the host: -Dstub.nativeLibraryDir=DIR. */
  public String nativeLibraryDir = System.getProperty("stub.nativeLibraryDir", "");
}
