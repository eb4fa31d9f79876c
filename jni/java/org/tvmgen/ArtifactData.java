package org.tvmgen;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * An artifact held by the app instead of a directory, for {@link Model#load(ArtifactData)}: the manifest's
 * bytes, the weights' bytes and the model library as bytes or as a library name. For weights an app ships
 * encrypted and decrypts itself, a model downloaded after install, or an artifact inside the APK's assets.
 *
 * <pre>{@code
 * // every file through one opener: an Android app's assets, a zip, a download cache, ...
 * ArtifactData data = ArtifactData.read("assets/model-cpu", name -> getAssets().open("model-cpu/" + name));
 * // an artifact packaged by tvmgen (aar, app): its library one of the app's native libraries, loaded in place
 * ArtifactData data = ArtifactData.readPackaged("tvmgen/m-cpu", name -> getAssets().open("tvmgen/m-cpu/" + name));
 * // or piece by piece: the weights decrypted by the app, the library from its own storage
 * ArtifactData data = ArtifactData.ofManifest("model", manifestBytes)
 *     .library(libraryBytes)                    // or .libraryPath("libmodel_cpu.so"): see libraryPath
 *     .weights(decrypt(encryptedWeights))       // byte[] or a direct ByteBuffer
 *     .stateFile("state/0.npy", initialState);  // a streaming model's initial state values, if its manifest names any
 * try (Model model = Model.load(data)) { ... }
 * }</pre>
 *
 * <p>Nothing is written to a file. The runtime reads the bytes during the load and keeps no reference to
 * them: once {@code load} returns, the app may drop them, or overwrite decrypted weights. The library's
 * bytes reach the dynamic loader through an anonymous in-memory file (Linux and Android's
 * {@code memfd_create}).
 */
public final class ArtifactData {
  /** Opens one of the artifact's files by its name in the artifact directory (manifest.json, model.so, ...). */
  public interface Files {
    /**
     * Opens a file of the artifact.
     *
     * @param fileName its name in the artifact directory, e.g. {@code manifest.json}
     * @return a stream of its bytes; {@link #read(String, Files)} closes it
     * @throws IOException if it cannot be opened
     */
    InputStream open(String fileName) throws IOException;
  }

  /**
   * In the asset directory of an artifact packaged by {@code tvmgen aar} or {@code tvmgen app}: the name of its
   * model library among the app's native libraries (one line, e.g. {@code libtvmgen_model_m_cpu_0123456789ab.so}).
   */
  public static final String LIBRARY_NAME_FILE = "library.txt";

  private final String name;
  private final byte[] manifest;
  private final String libraryFile;
  private final String weightsFile;
  private final List<String> stateFiles;
  private final Map<String, byte[]> stateBytes = new LinkedHashMap<String, byte[]>();
  private byte[] libraryArray;
  private ByteBuffer libraryBuffer;
  private String libraryPath;
  private byte[] weightsArray;
  private ByteBuffer weightsBuffer;

  private ArtifactData(String name, byte[] manifest) {
    if (name == null) {
      throw new NullPointerException("name");
    }
    if (manifest == null) {
      throw new NullPointerException("manifest");
    }
    Model.loadNativeLibrary();
    String[] files = NativeLib.artifactFiles(manifest);  // the runtime's own reading of the manifest
    this.name = name;
    this.manifest = manifest.clone();
    this.libraryFile = files[0];
    this.weightsFile = files[1];
    this.stateFiles = Collections.unmodifiableList(Arrays.asList(files).subList(2, files.length));
  }

  /**
   * An artifact from its manifest's bytes; give its library and (with {@code --separate-params}) its weights next.
   *
   * @param name what messages call the artifact (an asset directory, a URL, ...)
   * @param manifestJson manifest.json's bytes
   * @return the artifact, without library or weights yet
   * @throws TvmgenException if the manifest cannot be read
   */
  public static ArtifactData ofManifest(String name, byte[] manifestJson) {
    return new ArtifactData(name, manifestJson);
  }

  /**
   * Reads manifest.json, then the library and the weights file it names, each through {@code files}.
   *
   * @param name what messages call the artifact
   * @param files opens a file of the artifact by name
   * @return the artifact, ready for {@link Model#load(ArtifactData)}
   * @throws IOException if a file cannot be read
   * @throws TvmgenException if the manifest cannot be read
   */
  public static ArtifactData read(String name, Files files) throws IOException {
    ArtifactData data = new ArtifactData(name, readAll(files, "manifest.json"));
    data.library(readAll(files, data.libraryFile));
    data.readRest(files);
    return data;
  }

  /**
   * Reads an artifact packaged by {@code tvmgen aar} or {@code tvmgen app}: manifest.json and the weights through
   * {@code files}, and the name of its model library from {@value #LIBRARY_NAME_FILE}. The library itself is one
   * of the app's native libraries (the AAR's {@code jni/<abi>/}, the APK's {@code lib/<abi>/}, stored uncompressed
   * and 16 KB-aligned), which the dynamic linker finds by that name and maps in place: nothing is read or copied.
   *
   * @param name what messages call the artifact
   * @param files opens a file of the artifact's asset directory by name
   * @return the artifact, ready for {@link Model#load(ArtifactData)}
   * @throws IOException if a file cannot be read, or {@value #LIBRARY_NAME_FILE} names no library
   * @throws TvmgenException if the manifest cannot be read
   */
  public static ArtifactData readPackaged(String name, Files files) throws IOException {
    ArtifactData data = new ArtifactData(name, readAll(files, "manifest.json"));
    String library = new String(readAll(files, LIBRARY_NAME_FILE), "UTF-8").trim();
    if (!library.startsWith("lib") || !library.endsWith(".so") || library.indexOf('/') >= 0) {
      throw new IOException(name + "/" + LIBRARY_NAME_FILE + " should name a native library (lib*.so), not \""
          + library + "\"");
    }
    data.libraryPath(library);
    data.readRest(files);
    return data;
  }

  /**
   * What messages call the artifact.
   *
   * @return the name given
   */
  public String name() {
    return name;
  }

  /**
   * The model library's file name in the artifact directory (the manifest's {@code export.library}).
   *
   * @return e.g. {@code model.so}
   */
  public String libraryFile() {
    return libraryFile;
  }

  /**
   * The weights' file name in the artifact directory, for an artifact compiled with {@code --separate-params}.
   *
   * @return e.g. {@code model.params}, or null when the weights are inside the library
   */
  public String weightsFile() {
    return weightsFile;
  }

  /**
   * The model library's bytes.
   *
   * @param bytes the library file's bytes (copied into the in-memory file the library loads from)
   * @return this
   */
  public ArtifactData library(byte[] bytes) {
    clearLibrary();
    libraryArray = requireNonNull(bytes, "bytes");
    return this;
  }

  /**
   * The model library's bytes, between the buffer's position and limit (its position is not changed).
   *
   * @param bytes a direct buffer
   * @return this
   * @throws IllegalArgumentException if the buffer is not direct
   */
  public ArtifactData library(ByteBuffer bytes) {
    clearLibrary();
    libraryBuffer = direct(bytes, "library");
    return this;
  }

  /**
   * The model library as a file, or as a bare library name for the dynamic linker to find. On Android a
   * library packaged in the APK's {@code lib/<abi>/} (named {@code lib*.so}; uncompressed and 16 KB-aligned,
   * as AGP stores it with {@code useLegacyPackaging false}) is mapped by the platform's linker in place, from
   * the APK: {@code libraryPath("libmodel_cpu.so")}.
   *
   * @param pathOrName a path, or a file name without a directory
   * @return this
   */
  public ArtifactData libraryPath(String pathOrName) {
    clearLibrary();
    libraryPath = requireNonNull(pathOrName, "pathOrName");
    return this;
  }

  /**
   * The weights' bytes ({@link #weightsFile()}).
   *
   * @param bytes the weights file's bytes (pinned, not copied, while the model loads)
   * @return this
   */
  public ArtifactData weights(byte[] bytes) {
    weightsBuffer = null;
    weightsArray = requireNonNull(bytes, "bytes");
    return this;
  }

  /**
   * The weights' bytes, between the buffer's position and limit (its position is not changed).
   *
   * @param bytes a direct buffer
   * @return this
   * @throws IllegalArgumentException if the buffer is not direct
   */
  public ArtifactData weights(ByteBuffer bytes) {
    weightsArray = null;
    weightsBuffer = direct(bytes, "weights");
    return this;
  }

  /**
   * The files holding a streaming model's initial state values (.npy, paths relative to the artifact, e.g.
   * {@code state/0.npy}); give each with {@link #stateFile(String, byte[])} ({@link #read} does).
   *
   * @return an unmodifiable list, empty for a model without state or one whose state starts at zero
   */
  public List<String> stateFiles() {
    return stateFiles;
  }

  /**
   * One of {@link #stateFiles()}' bytes.
   *
   * @param file its path as the manifest names it
   * @param bytes the .npy file's bytes (copied during the load)
   * @return this
   */
  public ArtifactData stateFile(String file, byte[] bytes) {
    stateBytes.put(requireNonNull(file, "file"), requireNonNull(bytes, "bytes"));
    return this;
  }

  /** The weights and the initial state files through the opener. */
  private void readRest(Files files) throws IOException {
    if (weightsFile != null) {
      weights(readAll(files, weightsFile));
    }
    for (String file : stateFiles) {
      stateFile(file, readAll(files, file));
    }
  }

  /** The native load; the runtime checks what is missing or extra (library, weights) and a missing state file. */
  long load(int threads, int affinity) {
    String[] names = stateBytes.keySet().toArray(new String[0]);
    byte[][] bytes = stateBytes.values().toArray(new byte[0][]);
    return NativeLib.modelLoadFromMemory(name, manifest, libraryArray, libraryBuffer, libraryPath, weightsArray,
        weightsBuffer, names, bytes, threads, affinity);
  }

  @Override
  public String toString() {
    return "ArtifactData(" + name + ": " + libraryFile + (weightsFile == null ? "" : ", " + weightsFile) + ")";
  }

  private void clearLibrary() {
    libraryArray = null;
    libraryBuffer = null;
    libraryPath = null;
  }

  private static ByteBuffer direct(ByteBuffer bytes, String what) {
    requireNonNull(bytes, "bytes");
    if (!bytes.isDirect()) {
      throw new IllegalArgumentException(what + ": the ByteBuffer must be direct (ByteBuffer.allocateDirect); "
          + "for heap bytes pass a byte[]");
    }
    return bytes.slice();  // the native side reads a slice's whole capacity: position..limit of the original
  }

  private static <T> T requireNonNull(T value, String what) {
    if (value == null) {
      throw new NullPointerException(what);
    }
    return value;
  }

  private static byte[] readAll(Files files, String fileName) throws IOException {
    InputStream in = files.open(fileName);
    if (in == null) {
      throw new IOException("the artifact has no file " + fileName);
    }
    try {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      byte[] buf = new byte[1 << 16];
      for (int n; (n = in.read(buf)) > 0; ) {
        out.write(buf, 0, n);
      }
      return out.toByteArray();
    } finally {
      in.close();
    }
  }
}
