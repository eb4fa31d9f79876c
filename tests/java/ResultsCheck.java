import java.util.ArrayList;
import java.util.List;
import org.tvmgen.JsonObject;
import org.tvmgen.OutputSummary;
import org.tvmgen.PseudoRandom;
import org.tvmgen.RunStats;
import org.tvmgen.TensorInfo;
import org.tvmgen.Timings;

/**
 * The deploy app's results written by the Java API without a model (tests/reports/test_java_results.py):
 * java ResultsCheck RUN_MS... prints one JSON object — RunStats over the runs given (copy-in 0.1 ms,
 * copy-out 0.2 ms each), summaries of crafted outputs, the pseudo-random inputs and a string with
 * every character JSON escapes.
 */
public final class ResultsCheck {
  public static void main(String[] args) {
    RunStats stats = new RunStats();
    for (String a : args) {
      stats.add(new Timings(1, 2, 3, 0.1, Double.parseDouble(a), 0.2, 4));
    }
    float[] scores = {0.5f, 3.25f, -1f, 3.25f, Float.NaN, 7f, 0f, 2f, 1e-7f, -0f};
    float[] big = new float[OutputSummary.MAX_VALUES + 1];
    for (int i = 0; i < big.length; ++i) {
      big[i] = (i * 37) % 101;
    }
    List<JsonObject> outputs = new ArrayList<JsonObject>();
    outputs.add(OutputSummary.of(new TensorInfo("logits", new long[] {1, scores.length}, "float32", 40), scores));
    outputs.add(OutputSummary.of(new TensorInfo("map", new long[] {1, 1, big.length}, "float32", 4L * big.length),
        big));
    JsonObject out = stats.writeTo(new JsonObject());
    out.put("outputs", outputs)
        .put("pseudo_random_42", PseudoRandom.floats(1000, 42))
        .put("pseudo_random_43", PseudoRandom.floats(5, PseudoRandom.FIRST_SEED + 1))
        .put("text", "quote \" backslash \\ newline \n tab \t bell \u0007 é")
        .put("nan", Double.NaN)
        .put("empty_median", RunStats.percentile(new double[0], 50))
        .put("nothing", (String) null);
    System.out.println(out);
  }
}
