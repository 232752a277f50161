package eobatch.jvm;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.functions;
import scala.Tuple3;

/**
 * The lines of each piece of a files read and the first read id among them, observed while the
 * lines are read: what {@code eobatch.sources.files.read.locate} needs to turn a record's read id
 * into its line number, without a read of its own.
 *
 * <p>Input: (file, piece start, read id) of every line, blank ones included. The lines of a piece
 * come one after the other in its task, so the buffer looks a piece up only when the piece
 * changes. Output: one entry per piece, {@code file \u0001 start \u0001 lines \u0001 first id},
 * entries separated by {@code \u0002} (a file is Spark's URI of it, where no control character
 * stands unescaped).
 */
public final class PieceLines extends Aggregator<Tuple3<String, Long, Long>, PieceLines.Buf, String> {
  private static final long serialVersionUID = 1L;

  /** Per piece ({@code start \u0001 file}): {lines, first id}. */
  public static final class Buf implements Serializable {
    private static final long serialVersionUID = 1L;
    final HashMap<String, long[]> pieces = new HashMap<>();
    private transient String lastFile;
    private transient long lastStart = -1;
    private transient long[] last;

    void add(String file, long start, long id) {
      if (last == null || start != lastStart || !file.equals(lastFile)) {
        last = pieces.computeIfAbsent(file + '\u0001' + start, k -> new long[] {0, Long.MAX_VALUE});
        lastFile = file;
        lastStart = start;
      }
      last[0]++;
      if (id < last[1]) {
        last[1] = id;
      }
    }
  }

  /** Registers the aggregate as {@code name}: {@code name(file, start, id)}. */
  public static void register(SparkSession spark, String name) {
    spark.udf().register(name, functions.udaf(new PieceLines(),
        Encoders.tuple(Encoders.STRING(), Encoders.LONG(), Encoders.LONG())));
  }

  @Override
  public Buf zero() {
    return new Buf();
  }

  @Override
  public Buf reduce(Buf b, Tuple3<String, Long, Long> line) {
    b.add(line._1(), line._2(), line._3());
    return b;
  }

  /**
   * A piece is read whole by one task, so a piece in two buffers is one task run twice (a stage
   * Spark ran again after losing its output applies that task's observation again): its lines
   * count once.
   */
  @Override
  public Buf merge(Buf a, Buf b) {
    for (Map.Entry<String, long[]> e : b.pieces.entrySet()) {
      a.pieces.putIfAbsent(e.getKey(), e.getValue().clone());
    }
    a.last = null;
    return a;
  }

  @Override
  public String finish(Buf b) {
    StringBuilder out = new StringBuilder();
    for (Map.Entry<String, long[]> e : b.pieces.entrySet()) {
      String key = e.getKey();
      int cut = key.lastIndexOf('\u0001');
      if (out.length() > 0) {
        out.append('\u0002');
      }
      out.append(key, 0, cut).append('\u0001').append(key, cut + 1, key.length()).append('\u0001')
          .append(e.getValue()[0]).append('\u0001').append(e.getValue()[1]);
    }
    return out.toString();
  }

  @Override
  public Encoder<Buf> bufferEncoder() {
    return Encoders.javaSerialization(Buf.class);
  }

  @Override
  public Encoder<String> outputEncoder() {
    return Encoders.STRING();
  }
}
