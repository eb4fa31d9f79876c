package org.tvmgen;

/**
 * The life cycle that {@link Model}, {@link Module}, {@link Function} and {@link NDArray} share: a
 * native object owned through a handle until {@link #close()}, and the check that refuses a closed
 * object.
 *
 * <p>Package-private: each subclass frees its own kind of native object and says what was closed.
 * The handle is volatile so that {@link #checkOpen()} (not synchronized, since it also reads the
 * handle of a call argument) sees a close made on another thread.
 */
abstract class NativeHandle implements AutoCloseable {
  private volatile long handle;

  NativeHandle(long handle) {
    this.handle = handle;
  }

  /**
   * Whether {@link #close()} was called.
   *
   * @return true once closed
   */
  public synchronized boolean isClosed() {
    return handle == 0;
  }

  /** Releases this object's native side; further calls throw, closing again does nothing. */
  @Override
  public synchronized void close() {
    long h = handle;
    if (h != 0) {
      handle = 0;
      free(h);
    }
  }

  /** The native handle (also for a call argument: not synchronized); throws if closed. */
  final long checkOpen() {
    long h = handle;
    if (h == 0) {
      throw new IllegalStateException(closedMessage());
    }
    return h;
  }

  /** The handle as it is now: 0 once closed (for descriptions that must not throw). */
  final long currentHandle() {
    return handle;
  }

  /** Frees the native object behind {@code h}; called once, by {@link #close()}. */
  abstract void free(long h);

  /** What a use after {@link #close()} says, e.g. "the module model.so is closed". */
  abstract String closedMessage();
}
