package eobatch.jvm;

import java.io.Serializable;
import java.util.ArrayList;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.functions;

/**
 * An aggregate of the non-null strings it is given, at most {@code cap} characters of them in all,
 * in bounded memory.
 *
 * <p>The stage job's one read of a source that it could read again observes with it the records
 * to quarantine (one line of text each, spark_jobs/stage_batch.py), so that the quarantine is
 * written from them without a second read. The result is the strings joined by {@code '\n'} (in no
 * particular order; a string holds none), or null when there were more than {@code cap}
 * characters: every buffer, partial or merged, holds at most {@code cap} characters, so a batch
 * whose records are all bad costs no more memory than {@code cap} (the job then reads again).
 */
public final class CappedLines extends Aggregator<String, CappedLines.Buf, String> {
  private static final long serialVersionUID = 1L;

  /** The strings so far and their characters; {@code over}: more than the cap (then dropped). */
  public static final class Buf implements Serializable {
    private static final long serialVersionUID = 1L;
    ArrayList<String> lines = new ArrayList<>();
    long chars;
    boolean over;

    Buf add(String s, long cap) {
      if (over) {
        return this;
      }
      if (chars + s.length() + 1 > cap) {
        over = true;
        lines = new ArrayList<>();
        chars = 0;
        return this;
      }
      lines.add(s);
      chars += s.length() + 1;
      return this;
    }
  }

  private final long cap;

  public CappedLines(long cap) {
    if (cap < 0) {
      throw new IllegalArgumentException("cap must be >= 0, got " + cap);
    }
    this.cap = cap;
  }

  /** Registers the aggregate as {@code name} (callable from SQL and DataFrame expressions). */
  public static void register(SparkSession spark, String name, long cap) {
    spark.udf().register(name, functions.udaf(new CappedLines(cap), Encoders.STRING()));
  }

  @Override
  public Buf zero() {
    return new Buf();
  }

  @Override
  public Buf reduce(Buf b, String s) {
    return s == null ? b : b.add(s, cap);
  }

  @Override
  public Buf merge(Buf a, Buf b) {
    if (b.over) {
      a.over = true;
      a.lines = new ArrayList<>();
      a.chars = 0;
      return a;
    }
    for (int i = 0; i < b.lines.size() && !a.over; i++) {
      a.add(b.lines.get(i), cap);
    }
    return a;
  }

  @Override
  public String finish(Buf b) {
    return b.over ? null : String.join("\n", b.lines);
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
