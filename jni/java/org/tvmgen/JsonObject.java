package org.tvmgen;

import java.util.List;
import java.util.Locale;

/**
 * Writes one JSON object, key by key, for results files such as the deploy app's
 * {@code tvmgen-results.json}. Strings are escaped as JSON requires; a number that JSON cannot hold
 * (NaN, infinity) is written {@code null}. Keys keep the order they were put in.
 *
 * <pre>{@code
 * String json = new JsonObject().put("model", "mobilenet").put("runs_ms", runs).putJson("timings", t.toJson())
 *     .toString();
 * }</pre>
 */
public final class JsonObject {
  private final StringBuilder sb = new StringBuilder("{");
  private boolean empty = true;

  /**
   * Adds a string (null is written {@code null}).
   *
   * @param key the key
   * @param value the string
   * @return this object
   */
  public JsonObject put(String key, String value) {
    return putJson(key, value == null ? null : quote(value));
  }

  /**
   * Adds a number (NaN and infinities are written {@code null}).
   *
   * @param key the key
   * @param value the number
   * @return this object
   */
  public JsonObject put(String key, double value) {
    return putJson(key, number(value));
  }

  /**
   * Adds an integer.
   *
   * @param key the key
   * @param value the integer
   * @return this object
   */
  public JsonObject put(String key, long value) {
    return putJson(key, Long.toString(value));
  }

  /**
   * Adds a number with a fixed count of decimals, as the native runtime's {@code %.Nf} writes it (NaN and
   * infinities are written {@code null}): the value classes' {@code toJson} (Timings, PrepareStats).
   *
   * @param key the key
   * @param value the number
   * @param decimals digits after the point
   * @return this object
   */
  JsonObject putFixed(String key, double value, int decimals) {
    if (Double.isNaN(value) || Double.isInfinite(value)) {
      return putJson(key, null);
    }
    return putJson(key, String.format(Locale.ROOT, "%." + decimals + "f", value));
  }

  /**
   * Adds true or false.
   *
   * @param key the key
   * @param value the flag
   * @return this object
   */
  public JsonObject put(String key, boolean value) {
    return putJson(key, Boolean.toString(value));
  }

  /**
   * Adds an array of numbers.
   *
   * @param key the key
   * @param values the numbers, in order
   * @return this object
   */
  public JsonObject put(String key, double[] values) {
    StringBuilder a = new StringBuilder("[");
    for (int i = 0; i < values.length; ++i) {
      a.append(i > 0 ? ", " : "").append(number(values[i]));
    }
    return putJson(key, a.append(']').toString());
  }

  /**
   * Adds an array of 32-bit floats, each written with the digits that identify it as a float.
   *
   * @param key the key
   * @param values the numbers, in order
   * @return this object
   */
  public JsonObject put(String key, float[] values) {
    StringBuilder a = new StringBuilder("[");
    for (int i = 0; i < values.length; ++i) {
      float v = values[i];
      a.append(i > 0 ? ", " : "").append(Float.isNaN(v) || Float.isInfinite(v) ? "null" : Float.toString(v));
    }
    return putJson(key, a.append(']').toString());
  }

  /**
   * Adds an array of integers.
   *
   * @param key the key
   * @param values the integers, in order
   * @return this object
   */
  public JsonObject put(String key, long[] values) {
    StringBuilder a = new StringBuilder("[");
    for (int i = 0; i < values.length; ++i) {
      a.append(i > 0 ? ", " : "").append(values[i]);
    }
    return putJson(key, a.append(']').toString());
  }

  /**
   * Adds a nested object.
   *
   * @param key the key
   * @param value the object (null is written {@code null})
   * @return this object
   */
  public JsonObject put(String key, JsonObject value) {
    return putJson(key, value == null ? null : value.toString());
  }

  /**
   * Adds an array of nested objects.
   *
   * @param key the key
   * @param values the objects, in order
   * @return this object
   */
  public JsonObject put(String key, List<JsonObject> values) {
    StringBuilder a = new StringBuilder("[");
    for (int i = 0; i < values.size(); ++i) {
      a.append(i > 0 ? ", " : "").append(values.get(i));
    }
    return putJson(key, a.append(']').toString());
  }

  /**
   * Adds a value that is JSON already, as given: {@link Timings#toJson()}, {@link Memory#toJson()},
   * {@link Profile#toJson()}.
   *
   * @param key the key
   * @param json one JSON value (null is written {@code null})
   * @return this object
   */
  public JsonObject putJson(String key, String json) {
    sb.append(empty ? "" : ", ").append(quote(key)).append(": ").append(json == null ? "null" : json);
    empty = false;
    return this;
  }

  /**
   * The object written so far, closed.
   *
   * @return one line of JSON
   */
  @Override
  public String toString() {
    return sb.toString() + "}";
  }

  /**
   * A string as a JSON string literal: quotes, backslashes and control characters escaped.
   *
   * @param s the string
   * @return the literal, quotes included
   */
  public static String quote(String s) {
    StringBuilder q = new StringBuilder(s.length() + 2).append('"');
    for (int i = 0; i < s.length(); ++i) {
      char c = s.charAt(i);
      switch (c) {
        case '"':
          q.append("\\\"");
          break;
        case '\\':
          q.append("\\\\");
          break;
        case '\n':
          q.append("\\n");
          break;
        case '\r':
          q.append("\\r");
          break;
        case '\t':
          q.append("\\t");
          break;
        default:
          if (c < 0x20) {
            q.append(String.format("\\u%04x", (int) c));
          } else {
            q.append(c);
          }
      }
    }
    return q.append('"').toString();
  }

  /**
   * A number as JSON writes it: the shortest digits that give the double back; NaN and infinities,
   * which JSON cannot hold, as {@code null}.
   *
   * @param v the number
   * @return its JSON text
   */
  public static String number(double v) {
    if (Double.isNaN(v) || Double.isInfinite(v)) {
      return "null";
    }
    return v == Math.rint(v) && Math.abs(v) < 1e15 ? Long.toString((long) v) : Double.toString(v);
  }
}
