// Loads libortops.so into ONNX Runtime's Java binding and runs mmcv::NonMaxSuppression.
// Run by tests/python/test_bindings.py: java NmsCheck <libortops.so> <model.onnx>.
import ai.onnxruntime.*;
import java.nio.FloatBuffer;
import java.util.Map;

public class NmsCheck {
  public static void main(String[] args) throws Exception {
    OrtEnvironment env = OrtEnvironment.getEnvironment();
    OrtSession.SessionOptions options = new OrtSession.SessionOptions();
    options.registerCustomOpLibrary(args[0]);
    try (OrtSession session = env.createSession(args[1], options)) {
      float[] boxes = {0, 0, 10, 10, 1, 1, 11, 11, 20, 20, 30, 30};
      float[] scores = {0.9f, 0.8f, 0.7f};
      OnnxTensor b = OnnxTensor.createTensor(env, FloatBuffer.wrap(boxes), new long[] {3, 4});
      OnnxTensor s = OnnxTensor.createTensor(env, FloatBuffer.wrap(scores), new long[] {3});
      try (OrtSession.Result r = session.run(Map.of("boxes", b, "scores", s))) {
        long[] kept = (long[]) r.get(0).getValue();
        System.out.println("kept " + java.util.Arrays.toString(kept));
      }
    }
  }
}
