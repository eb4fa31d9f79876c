package org.tvmgen;

import android.content.res.AssetManager;

import java.io.IOException;
import java.io.InputStream;

/**
 * Models from an Android app's assets, loaded from memory: no copy to the app's files, no file written.
 *
 * <pre>{@code
 * try (Model model = AndroidAssets.load(getAssets(), "tvmgen/mobilenet-cpu", 0, Model.AFFINITY_ANY)) { ... }
 * }</pre>
 *
 * <p>Android only: this class needs android.jar, so it lives apart from the plain-Java API
 * (jni/java-android) and is compiled by the app's Gradle build (tvmgen's deploy app uses it). Its logic is
 * {@link ArtifactData#read(String, ArtifactData.Files)} with {@link AssetManager#open(String)} as the opener;
 * an app using tvmgen's AAR (whose classes.jar is built without android.jar) writes the same line itself.
 */
public final class AndroidAssets {
  private AndroidAssets() {}

  /**
   * Reads an artifact directory of the assets (manifest.json, the model library, the weights) into memory.
   *
   * @param assets the app's assets ({@code context.getAssets()})
   * @param dir the artifact's directory under assets/, e.g. {@code tvmgen/mobilenet-cpu}
   * @return the artifact, for {@link Model#load(ArtifactData, int, int)}
   * @throws IOException if a file is missing from the assets
   */
  public static ArtifactData read(final AssetManager assets, final String dir) throws IOException {
    return ArtifactData.read("assets/" + dir, new ArtifactData.Files() {
      @Override
      public InputStream open(String fileName) throws IOException {
        return assets.open(dir + "/" + fileName);
      }
    });
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
