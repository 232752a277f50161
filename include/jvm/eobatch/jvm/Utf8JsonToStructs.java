package eobatch.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.ExprUtils;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.catalyst.json.CreateJacksonParser;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.catalyst.util.FailFastMode$;
import org.apache.spark.sql.catalyst.util.FailureSafeParser;
import org.apache.spark.sql.catalyst.util.ParseMode;
import org.apache.spark.sql.catalyst.util.PermissiveMode$;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.ObjectType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's {@code from_json(json, schema, options)} into a struct, with one difference: Jackson
 * parses the record's UTF-8 bytes, read in place, instead of characters decoded from them.
 *
 * <p>Spark 4.2's {@code from_json} hands Jackson each record through a new
 * {@code InputStreamReader} (its decoder allocates an 8 KiB buffer per record, then Jackson
 * parses characters); Spark's JSON file reader hands Jackson the bytes. Measured on 5M records of
 * the bench: a pass that reads and parses them took 7.3 s with {@code from_json}, 4.1 s with this
 * (2.3 s of it reading the lines). This expression is Spark's own {@code JsonToStructsEvaluator}
 * with that one change: the same {@code JSONOptions}, {@code JacksonParser} (objects only, as
 * {@code from_json}) and {@code FailureSafeParser}, so the same values, nulls and corrupt-record
 * column ({@code tests/integration/test_spark_read_classify.py} compares them).
 *
 * <p>Jackson's byte source guesses the encoding from the first bytes, the reader path does not: a
 * record that starts with '{' followed by a non-zero byte is always read as UTF-8, so only such
 * records take the byte path; any other goes through Spark's reader path, unchanged. On invalid
 * UTF-8 the two paths may disagree (bytes refuse what the reader replaces with U+FFFD): the stage
 * job accepts a record only when it is valid UTF-8 and re-parses the others with Spark's own
 * {@code from_json} to name the reason.
 */
public final class Utf8JsonToStructs implements Serializable {
  private static final long serialVersionUID = 1L;

  private final scala.collection.immutable.Map<String, String> options;
  private final StructType schema;
  private final String timeZone;
  private final String defaultCorrupt;
  private transient FailureSafeParser<UTF8String> parser;

  private Utf8JsonToStructs(scala.collection.immutable.Map<String, String> options, StructType schema,
                            String timeZone, String defaultCorrupt) {
    this.options = options;
    this.schema = schema;
    this.timeZone = timeZone;
    this.defaultCorrupt = defaultCorrupt;
  }

  static JsonParser open(JsonFactory factory, UTF8String record) {
    try {
      if (record.numBytes() >= 2 && record.getByte(0) == '{' && record.getByte(1) != 0) {
        // a stream, not the array: with an array as its source, JacksonParser takes a non-string
        // value of a STRING field as the source's text at the token's offsets (exact string
        // parsing), where from_json re-writes the value; from a stream it re-writes it too
        ByteBuffer bytes = record.getByteBuffer(); // the record's own array when on the heap
        return factory.createParser(
            new ByteArrayInputStream(bytes.array(), bytes.arrayOffset() + bytes.position(), bytes.remaining()));
      }
      return CreateJacksonParser.utf8String(factory, record);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private FailureSafeParser<UTF8String> parser() {
    if (parser == null) { // as JsonToStructsEvaluator.parser, with ``open`` as the parser factory
      JSONOptions parsed = new JSONOptions(options, timeZone, defaultCorrupt);
      ParseMode mode = parsed.parseMode();
      if (mode != PermissiveMode$.MODULE$ && mode != FailFastMode$.MODULE$) {
        throw new IllegalArgumentException("from_json supports the PERMISSIVE and FAILFAST modes, not " + mode.name());
      }
      String corrupt = parsed.columnNameOfCorruptRecord();
      ExprUtils.verifyColumnNameOfCorruptRecord(schema, corrupt);
      List<StructField> fields = new ArrayList<>();
      for (StructField f : schema.fields()) {
        if (!f.name().equals(corrupt)) {
          fields.add(f);
        }
      }
      JacksonParser raw = new JacksonParser(new StructType(fields.toArray(new StructField[0])), parsed, false,
          CollectionConverters.asScala(new ArrayList<Filter>()).toList());
      scala.Function2<JsonFactory, UTF8String, JsonParser> create = Utf8JsonToStructs::open;
      scala.Function1<UTF8String, UTF8String> same = s -> s;
      parser = new FailureSafeParser<>(in -> raw.parse(in, create, same), mode, schema, corrupt);
    }
    return parser;
  }

  public InternalRow evaluate(UTF8String json) {
    if (json == null) {
      return null;
    }
    Iterator<InternalRow> rows = parser().parse(json);
    return rows.hasNext() ? rows.next() : null;
  }

  /**
   * {@code from_json(raw, schema, options)}, read from the bytes: {@code schema} as
   * {@code StructType.json()} (all fields nullable, as {@code from_json} makes them),
   * {@code timeZone} the session's (what {@code from_json} is given).
   */
  @SuppressWarnings("unchecked")
  public static Column column(Column raw, String schemaJson, Map<String, String> options, String timeZone) {
    DataType type = DataType.fromJson(schemaJson);
    if (!(type instanceof StructType)) {
      throw new IllegalArgumentException("a struct schema is required, got " + type.simpleString());
    }
    StructType schema = ((StructType) type).asNullable();
    scala.collection.immutable.Map<String, String> opts = scala.collection.immutable.Map$.MODULE$.empty();
    for (Map.Entry<String, String> e : options.entrySet()) {
      opts = opts.updated(e.getKey(), e.getValue());
    }
    Utf8JsonToStructs evaluator = new Utf8JsonToStructs(opts, schema, timeZone,
        SQLConf.get().columnNameOfCorruptRecord());
    List<Expression> args = new ArrayList<>();
    args.add(ExpressionUtils.expression(raw));
    List<AbstractDataType> types = new ArrayList<>();
    types.add(DataTypes.StringType);
    Expression call = new Invoke(Literal.create(evaluator, new ObjectType(Utf8JsonToStructs.class)), "evaluate",
        schema, CollectionConverters.asScala(args).toList(), CollectionConverters.asScala(types).toList(),
        true, true, true);
    return ExpressionUtils.column(call);
  }
}
