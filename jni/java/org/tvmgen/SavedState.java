package org.tvmgen;

import java.util.List;

/**
 * A streaming model's state at one moment, from {@link Model#saveState()}: a host copy of every state
 * tensor's bytes, to go back to with {@link Model#restoreState(SavedState)}, for instance to pause one
 * stream, serve another with the same model and resume the first. Immutable; it does not depend on the
 * model staying open, and any model with the same state tensors (names, dtypes and sizes) can restore it.
 */
public final class SavedState {
  private final List<TensorInfo> states;
  private final byte[][] bytes;

  SavedState(List<TensorInfo> states, byte[][] bytes) {
    this.states = states;
    this.bytes = bytes;
  }

  /**
   * The state tensors saved, in the model's order.
   *
   * @return an unmodifiable list, as {@link Model#states()} gave it
   */
  public List<TensorInfo> states() {
    return states;
  }

  /**
   * One state tensor's saved bytes (native byte order).
   *
   * @param name the state's name (its input's)
   * @return a copy of its bytes
   * @throws TvmgenException if nothing of that name was saved
   */
  public byte[] bytes(String name) {
    return bytes[indexOf(name)].clone();
  }

  /** The saved bytes of state {@code index}, not copied (for {@link Model#restoreState(SavedState)}). */
  byte[] bytesAt(int index) {
    return bytes[index];
  }

  private int indexOf(String name) {
    for (int i = 0; i < states.size(); ++i) {
      if (states.get(i).name().equals(name)) {
        return i;
      }
    }
    throw new TvmgenException("no state \"" + name + "\" was saved; the saved states are " + states);
  }

  /**
   * The states saved.
   *
   * @return e.g. {@code SavedState([h: float32[1, 64]])}
   */
  @Override
  public String toString() {
    return "SavedState(" + states + ")";
  }
}
