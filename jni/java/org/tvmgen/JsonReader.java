package org.tvmgen;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A minimal JSON reader for the native runtime's reports ({@link Profile}'s, and any value class that
 * reads JSON): objects (LinkedHashMap), arrays (ArrayList), strings, numbers (Double), true/false/null.
 * Package-private: an application reads the value classes' getters.
 */
final class JsonReader {
  private final String s;
  private final String what;
  private int i;

  /**
   * A reader of one JSON text.
   *
   * @param s the text
   * @param what what it is, for errors (e.g. "the profile")
   * @throws TvmgenException if s is null
   */
  JsonReader(String s, String what) {
    if (s == null) {
      throw new TvmgenException(what + " is null");
    }
    this.s = s;
    this.what = what;
  }

  /**
   * The number under a key of an object.
   *
   * @param obj the object
   * @param key the key
   * @param what the object, for the error (e.g. "the profile")
   * @return the number
   * @throws TvmgenException if the object has no number there
   */
  static double number(Map<String, Object> obj, String key, String what) {
    Object v = obj.get(key);
    if (!(v instanceof Double)) {
      throw new TvmgenException(what + " has no number \"" + key + "\"");
    }
    return (Double) v;
  }

  /**
   * A value read by {@link #readValue()} as an object.
   *
   * @param v the value
   * @param what the value, for the error
   * @return its map
   * @throws TvmgenException if it is not an object
   */
  @SuppressWarnings("unchecked")
  static Map<String, Object> asObject(Object v, String what) {
    if (!(v instanceof Map)) {
      throw new TvmgenException(what + " is not a JSON object");
    }
    return (Map<String, Object>) v;
  }

  Object readValue() {
    skip();
    if (i >= s.length()) {
      throw error("unexpected end");
    }
    char c = s.charAt(i);
    if (c == '{') {
      Map<String, Object> map = new LinkedHashMap<String, Object>();
      ++i;
      if (peek() == '}') {
        ++i;
        return map;
      }
      do {
        skip();
        String key = readString();
        expect(':');
        map.put(key, readValue());
      } while (comma('}'));
      return map;
    }
    if (c == '[') {
      List<Object> list = new ArrayList<Object>();
      ++i;
      if (peek() == ']') {
        ++i;
        return list;
      }
      do {
        list.add(readValue());
      } while (comma(']'));
      return list;
    }
    if (c == '"') {
      return readString();
    }
    for (String word : new String[] {"true", "false", "null"}) {
      if (s.startsWith(word, i)) {
        i += word.length();
        return word.equals("null") ? null : Boolean.valueOf(word);
      }
    }
    int start = i;
    while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
      ++i;
    }
    try {
      return Double.valueOf(s.substring(start, i));
    } catch (NumberFormatException e) {
      throw error("not a JSON value");
    }
  }

  private String readString() {
    if (peek() != '"') {
      throw error("expected a string");
    }
    StringBuilder sb = new StringBuilder();
    for (++i; i < s.length(); ++i) {
      char c = s.charAt(i);
      if (c == '"') {
        ++i;
        return sb.toString();
      }
      if (c == '\\' && i + 1 < s.length()) {
        char e = s.charAt(++i);
        if (e == 'u' && i + 4 < s.length()) {
          sb.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16));
          i += 4;
        } else {
          sb.append(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e);
        }
      } else {
        sb.append(c);
      }
    }
    throw error("unterminated string");
  }

  private boolean comma(char close) {
    char c = peek();
    ++i;
    if (c == ',') {
      return true;
    }
    if (c == close) {
      return false;
    }
    --i;
    throw error("expected ',' or '" + close + "'");
  }

  private void expect(char c) {
    if (peek() != c) {
      throw error("expected '" + c + "'");
    }
    ++i;
  }

  private char peek() {
    skip();
    return i < s.length() ? s.charAt(i) : '\0';
  }

  private void skip() {
    while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
      ++i;
    }
  }

  private TvmgenException error(String what) {
    return new TvmgenException("cannot read " + this.what + " JSON at character " + i + ": " + what);
  }
}
