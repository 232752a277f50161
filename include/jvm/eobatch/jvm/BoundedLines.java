package eobatch.jvm;

import java.io.Closeable;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.TextBasedFileFormat;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.TaskCompletionListener;
import scala.Function1;
import scala.Option;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.collection.immutable.Seq;

/**
 * The lines of JSON-lines landing files, in bounded memory whatever a line's length: Spark's
 * text source with one difference, a line longer than {@code maxLineBytes} is never held whole.
 *
 * <p>{@code spark.read.format("eobatch.jvm.BoundedLines").option("maxLineBytes", n)
 * .option("blankBytes", " \t\r\u000b\f").load(paths)}: one row per line (blank ones included),
 * columns {@code value} (STRING: the line's bytes, a final {@code \r} included, as Spark's text
 * source gives them) and {@code bytes} (LONG). A line of at most {@code maxLineBytes} bytes is
 * {@code value} whole and {@code bytes} null. A longer line is streamed through, never stored:
 * {@code value} is its first {@code maxLineBytes} bytes and {@code bytes} the length of its
 * record (the line without a final {@code \r}); a longer line made only of the blank bytes is
 * blank like a short one, and reads as an empty line.
 *
 * <p>The lines are those of {@code eobatch.lines} (plugins/eobatch/lines.py, the planner's count):
 * the bytes between two {@code \n}, a UTF-8 byte order mark at the very start of a file not part
 * of its first line. A file is read in pieces as Hadoop's {@code LineRecordReader} reads them:
 * a line belongs to the piece holding the {@code \n} before it (the first line to the first
 * piece), and is read whole, past the piece's end, by that piece; a piece reads no further than
 * its end to find its first line (Hadoop's reads to the next \n: a line of n pieces would be read
 * n times). Hadoop's own bound
 * ({@code mapreduce.input.linerecordreader.line.maxlength}) is no substitute: it stops reading a
 * long line at the piece's end, and returns a fragment of it as a line (the rest of an over-long
 * line after a piece boundary, which can be a valid record, was read as one).
 */
public class BoundedLines extends TextBasedFileFormat implements Serializable {
  private static final long serialVersionUID = 1L;
  public static final String MAX_LINE_BYTES = "maxLineBytes";
  public static final String BLANK_BYTES = "blankBytes";
  static final StructType SCHEMA = new StructType(new StructField[] {
      DataTypes.createStructField("value", DataTypes.StringType, true),
      DataTypes.createStructField("bytes", DataTypes.LongType, true)});

  @Override
  public Option<StructType> inferSchema(SparkSession spark, Map<String, String> options, Seq<FileStatus> files) {
    return Option.apply(SCHEMA);
  }

  @Override
  public OutputWriterFactory prepareWrite(SparkSession spark, Job job, Map<String, String> options,
                                          StructType dataSchema) {
    throw new UnsupportedOperationException("eobatch.jvm.BoundedLines only reads");
  }

  @Override
  public boolean isSplitable(SparkSession spark, Map<String, String> options, Path path) {
    return true; // bytes are read as they are: never through a compression codec
  }

  @Override
  public String toString() {
    return "BoundedLines";
  }

  static String option(Map<String, String> options, String key) {
    Option<String> v = options.get(key);
    if (v.isEmpty()) {
      v = options.get(key.toLowerCase(java.util.Locale.ROOT));
    }
    if (v.isEmpty()) {
      throw new IllegalArgumentException("eobatch.jvm.BoundedLines needs the option " + key);
    }
    return v.get();
  }

  @Override
  @SuppressWarnings("unchecked")
  public Function1<PartitionedFile, Iterator<InternalRow>> buildReader(
      SparkSession spark, StructType dataSchema, StructType partitionSchema, StructType requiredSchema,
      Seq<Filter> filters, Map<String, String> options, Configuration hadoopConf) {
    int cap = Integer.parseInt(option(options, MAX_LINE_BYTES));
    if (cap < 1) {
      throw new IllegalArgumentException("eobatch.jvm.BoundedLines: maxLineBytes must be positive, got " + cap);
    }
    byte[] blank = option(options, BLANK_BYTES).getBytes(StandardCharsets.ISO_8859_1);
    boolean[] isBlank = new boolean[256];
    for (byte b : blank) {
      isBlank[b & 0xff] = true;
    }
    String[] names = requiredSchema.fieldNames();
    boolean[] wantValue = new boolean[names.length];
    for (int i = 0; i < names.length; i++) {
      wantValue[i] = names[i].equals("value");
    }
    Broadcast<SerializableConfiguration> conf = SerializableConfiguration.broadcast(spark.sparkContext(), hadoopConf);
    return (Function1<PartitionedFile, Iterator<InternalRow>> & Serializable) file -> {
      Reader r = new Reader(file, conf.value().value(), cap, isBlank, wantValue);
      TaskContext ctx = TaskContext.get();
      if (ctx != null) {
        ctx.addTaskCompletionListener((TaskCompletionListener) c -> r.close());
      }
      return r;
    };
  }

  /** The lines of one piece of a file. */
  static final class Reader extends AbstractIterator<InternalRow> implements Closeable {
    private final FSDataInputStream in;
    private final long end;
    private final int cap;
    private final boolean[] isBlank;
    private final boolean[] wantValue;
    private final UnsafeRowWriter writer;
    private final byte[] buf = new byte[1 << 16];
    private int bufPos;
    private int bufLen;
    private long pos; // the file position of buf[bufPos]
    private boolean first; // the file's first line is next (the first piece reads it whatever its end)
    private boolean closed;
    private boolean ready; // a line is read and not returned yet
    private boolean done;
    // the line read: whole in buf[directOff, directOff + keptLen) when ``direct``, else its first
    // ``keptLen`` bytes in ``kept``; ``total`` its bytes, ``last`` its last byte, ``blank`` whether
    // all of them are blank bytes (known only for a line longer than ``cap``)
    private byte[] kept = new byte[256];
    private int keptLen;
    private boolean direct;
    private int directOff;
    private long total;
    private byte last;
    private boolean blank;

    Reader(PartitionedFile file, Configuration conf, int cap, boolean[] isBlank, boolean[] wantValue) {
      this.cap = cap;
      this.isBlank = isBlank;
      this.wantValue = wantValue;
      this.writer = new UnsafeRowWriter(wantValue.length);
      long start = file.start();
      this.end = start + file.length();
      Path path = file.toPath();
      try {
        in = path.getFileSystem(conf).open(path);
        try {
          if (start > 0) {
            in.seek(start);
            pos = start;
            skipToNextLine();
          } else {
            first = true;
            skipByteOrderMark();
          }
        } catch (IOException | RuntimeException e) {
          in.close();
          throw e;
        }
      } catch (IOException e) {
        throw new UncheckedIOException("cannot read " + path, e);
      }
    }

    private boolean fill() throws IOException {
      if (bufPos < bufLen) {
        return true;
      }
      int n = in.read(buf, 0, buf.length);
      while (n == 0) {
        n = in.read(buf, 0, buf.length);
      }
      bufPos = 0;
      bufLen = Math.max(n, 0);
      return n > 0;
    }

    private void skipByteOrderMark() throws IOException {
      while (bufLen < 3) {
        int n = in.read(buf, bufLen, buf.length - bufLen);
        if (n < 0) {
          break;
        }
        bufLen += n;
      }
      if (bufLen >= 3 && buf[0] == (byte) 0xEF && buf[1] == (byte) 0xBB && buf[2] == (byte) 0xBF) {
        bufPos = 3;
        pos = 3;
      }
    }

    /**
     * Past the first \n of the piece: the line that holds the piece's first byte belongs to an
     * earlier piece. A piece without any \n holds no line's start: nothing is read past its end
     * (a line of any length is read once, by its own piece, not to its end by every piece in it).
     */
    private void skipToNextLine() throws IOException {
      while (pos < end && fill()) {
        int limit = (int) Math.min(bufLen, bufPos + (end - pos));
        int i = indexOfNewline(bufPos, limit);
        int to = i < 0 ? limit : i + 1;
        pos += to - bufPos;
        bufPos = to;
        if (i >= 0) {
          return;
        }
      }
      done = true;
    }

    private int indexOfNewline(int from, int limit) {
      for (int i = from; i < limit; i++) {
        if (buf[i] == '\n') {
          return i;
        }
      }
      return -1;
    }

    private boolean allBlank(byte[] b, int off, int n) {
      for (int i = off; i < off + n; i++) {
        if (!isBlank[b[i] & 0xff]) {
          return false;
        }
      }
      return true;
    }

    private void keep(int off, int n) {
      if (n == 0) {
        return;
      }
      last = buf[off + n - 1];
      long before = total;
      total += n;
      int k = before < cap ? (int) Math.min(n, cap - before) : 0;
      if (k > 0) {
        if (keptLen + k > kept.length) {
          kept = java.util.Arrays.copyOf(kept, (int) Math.min(cap, Math.max(2L * kept.length, keptLen + k)));
        }
        System.arraycopy(buf, off, kept, keptLen, k);
        keptLen += k;
      }
      if (total > cap) {
        if (before <= cap) { // just past the cap: from here on, only whether the line is blank is kept
          blank = allBlank(kept, 0, keptLen);
        }
        if (blank) {
          blank = allBlank(buf, off + k, n - k);
        }
      }
    }

    /** The next line from ``pos``; false at the end of the file with no byte left. */
    private boolean readLine() throws IOException {
      keptLen = 0;
      total = 0;
      direct = false;
      blank = false;
      boolean any = false;
      while (fill()) {
        any = true;
        int i = indexOfNewline(bufPos, bufLen);
        int n = (i < 0 ? bufLen : i) - bufPos;
        if (i >= 0 && total == 0 && n <= cap) { // the whole line is in the buffer: no copy
          direct = true;
          directOff = bufPos;
          keptLen = n;
          total = n;
        } else {
          keep(bufPos, n);
        }
        pos += n + (i < 0 ? 0 : 1);
        bufPos += n + (i < 0 ? 0 : 1);
        if (i >= 0) {
          return true;
        }
      }
      return any;
    }

    @Override
    public boolean hasNext() {
      if (!ready && !done) {
        try {
          ready = (first || pos <= end) && readLine();
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
        first = false;
        done = !ready;
        if (done) {
          close();
        }
      }
      return ready;
    }

    @Override
    public InternalRow next() {
      if (!hasNext()) {
        throw new java.util.NoSuchElementException();
      }
      ready = false;
      boolean whole = total <= cap;
      boolean blankLong = !whole && blank;
      writer.reset();
      writer.zeroOutNullBytes();
      for (int i = 0; i < wantValue.length; i++) {
        if (wantValue[i]) {
          if (blankLong) {
            writer.write(i, kept, 0, 0);
          } else {
            writer.write(i, direct ? buf : kept, direct ? directOff : 0, keptLen);
          }
        } else if (whole || blankLong) {
          writer.setNullAt(i);
        } else {
          writer.write(i, total - (last == '\r' ? 1 : 0));
        }
      }
      return writer.getRow();
    }

    @Override
    public void close() {
      if (!closed) {
        closed = true;
        try {
          in.close();
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      }
    }
  }
}
