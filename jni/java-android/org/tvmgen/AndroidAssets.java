package org.tvmgen;

import android.content.res.AssetManager;

import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;

/**
 * Models from an Android app's assets, loaded with nothing copied to the app's files and no file written.
 *
 * <pre>{@code
 * try (Model model = AndroidAssets.load(getAssets(), "tvmgen/mobilenet-cpu", 0, Model.AFFINITY_ANY)) { ... }
 * }</pre>
 *
 * <p>An artifact packaged by {@code tvmgen app} or {@code tvmgen aar} keeps its model library among the app's
 * native libraries and names it in {@value ArtifactData#LIBRARY_NAME_FILE}: the platform's linker maps it in place
 * from the APK ({@link ArtifactData#readPackaged}). An artifact directory copied whole into the assets (model.so
 * included) loads from memory ({@link ArtifactData#read}: the library through an in-memory file).
 *
 * <p>Android only: this class needs android.jar, so it lives apart from the plain-Java API
 * (jni/java-android) and is compiled by the app's Gradle build (tvmgen's deploy app uses it). An app using
 * tvmgen's AAR (whose classes.jar is built without android.jar) calls {@link ArtifactData#readPackaged} with
 * {@link AssetManager#open(String)} as the opener, as this class does.
 */
public final class AndroidAssets {
  private AndroidAssets() {}

  /**
   * Reads an artifact directory of the assets: manifest.json and the weights into memory, and the model library
   * by its name among the app's native libraries ({@value ArtifactData#LIBRARY_NAME_FILE}) or, for a directory
   * holding it, as bytes.
   *
   * @param assets the app's assets ({@code context.getAssets()})
   * @param dir the artifact's directory under assets/, e.g. {@code tvmgen/mobilenet-cpu}
   * @return the artifact, for {@link Model#load(ArtifactData, int, int)}
   * @throws IOException if a file is missing from the assets
   */
  public static ArtifactData read(final AssetManager assets, final String dir) throws IOException {
    ArtifactData.Files files = new ArtifactData.Files() {
      @Override
      public InputStream open(String fileName) throws IOException {
        return assets.open(dir + "/" + fileName);
      }
    };
    String[] names = assets.list(dir);
    boolean packaged = names != null && Arrays.asList(names).contains(ArtifactData.LIBRARY_NAME_FILE);
    return packaged ? ArtifactData.readPackaged("assets/" + dir, files) : ArtifactData.read("assets/" + dir, files);
  }

  /**
   * Loads an artifact directory of the assets.
   *
   * @param assets the app's assets
   * @param dir the artifact's directory under assets/
   * @param threads CPU threads (see {@link Model#load(String, int, int)})
   * @param affinity {@link Model#AFFINITY_BIG}, {@link Model#AFFINITY_LITTLE} or {@link Model#AFFINITY_ANY}
   * @return the loaded model; close it when done
   * @throws IOException if a file is missing from the assets
   * @throws TvmgenException if the artifact cannot be loaded
   */
  public static Model load(AssetManager assets, String dir, int threads, int affinity) throws IOException {
    return Model.load(read(assets, dir), threads, affinity);
  }
}
