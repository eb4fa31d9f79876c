package org.tvmgen;

/**
 * A failure reported by the tvmgen native runtime: the artifact cannot be loaded, an input has the
 * wrong size or name, running the model failed, and so on. The message is the runtime's own,
 * which names the file, input or device involved.
 *
 * <p>Unchecked, like the errors of the C++ API ({@code tvmgen::Error}) it carries.
 */
public class TvmgenException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /**
   * Creates an exception with the runtime's message.
   *
   * @param message what failed, and where
   */
  public TvmgenException(String message) {
    super(message);
  }

  /**
   * Creates an exception with a message and the exception that caused it.
   *
   * @param message what failed, and where
   * @param cause the underlying exception
   */
  public TvmgenException(String message, Throwable cause) {
    super(message, cause);
  }
}
