package android.content;

/** Extras not put here come from system properties: -Dextra.NAME=VALUE (an am start's extras). */
public class Intent {
  private final java.util.Map<String, Object> extras = new java.util.HashMap<String, Object>();
  private String action;

  public Intent() {}
  public Intent(Context packageContext, Class<?> cls) {}

  private Object extra(String name) {
    return extras.containsKey(name) ? extras.get(name) : System.getProperty("extra." + name);
  }
  public boolean hasExtra(String name) { return extra(name) != null; }
  public int getIntExtra(String name, int def) {
    Object v = extra(name);
    return v == null ? def : v instanceof Integer ? (Integer) v : Integer.parseInt((String) v);
  }
  public boolean getBooleanExtra(String name, boolean def) {
    Object v = extra(name);
    return v == null ? def : v instanceof Boolean ? (Boolean) v : Boolean.parseBoolean((String) v);
  }
  public String getStringExtra(String name) { return (String) extra(name); }
  public Intent putExtra(String name, String value) { extras.put(name, value); return this; }
  public Intent putExtra(String name, int value) { extras.put(name, value); return this; }
  public Intent putExtra(String name, boolean value) { extras.put(name, value); return this; }
  public String getAction() { return action; }
  public Intent setAction(String action) { this.action = action; return this; }
}
