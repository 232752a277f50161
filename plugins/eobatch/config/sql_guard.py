"""The Spark SQL of a pipeline YAML (an expectation's ``expr``, ``sink.merge.delete_when``) stays an
expression over the record: nothing that reaches the JVM, the file system or a shell.

Spark SQL can do all three from one expression: ``java_method``, ``reflect`` and ``try_reflect``
call any static Java method (``java_method('java.lang.System', 'getenv', 'AIRFLOW_CONN_X')``
reads the driver's environment, and an expectation's verdict, quarantined or not, turns it into an
oracle); a subquery reads any file (``(FROM text.`/proc/self/environ`)``) or runs a command
(``(SELECT TRANSFORM(...) USING 'sh ...')``); ``IDENTIFIER('java_method')(...)`` hides a function's
name in a string; ``from_protobuf``/``to_protobuf`` read a descriptor file named by a string. An
expectation is a per-record check of built-in functions: none of these is ever needed.

Two checks, each refusing with the reason:

* ``refusal(text)``, at load (pure Python, no pyspark): a tokenizer that knows Spark's literals,
  quoted identifiers and comments; it refuses those functions however they are spelled (any case,
  back-quoted, double-quoted, qualified as ``system.builtin.``), the ``IDENTIFIER`` clause and the
  words that start a query (``SELECT``, ``TABLE``, ``VALUES``, ``USING``, ``FROM`` after ``(``, the
  ``|>`` pipe). The loader raises it as the file's error, naming the key.
* ``job_refusal(df, text)``, in the stage job, on what Spark itself makes of the text: its parser's
  tree (before any analysis: the analysis of a reflective call already loads the class it names),
  then its analysis over ``df`` (a function a transform registered, a SQL function's body), both
  walked node by node. A spec written by hand, past the loader, is refused there.

``Invoke``/``StaticInvoke`` nodes are not refused: Spark builds them only for its own built-in
functions, with targets no SQL text chooses (and the analyzed plan keeps the built-in's own node).
"""

from __future__ import annotations

import re

# functions that run arbitrary JVM code or read a file a string names
REFUSED_FUNCTIONS = frozenset({"java_method", "reflect", "try_reflect", "from_protobuf", "to_protobuf", "identifier"})
# words that start a query (a subquery reads files, runs a script) or a script transformation
QUERY_WORDS = frozenset({"select", "table", "values", "using"})
# nodes of Spark's trees (simple class names) refused wherever they are: reflection, user-defined
# functions (a transform's registration, a SQL function: code that is not a built-in), protobuf's
# descriptor files
REFUSED_NODES = ("CallMethodViaReflection", "TryReflect", "ExpressionWithUnresolvedIdentifier", "UDF", "UDAF",
                 "Protobuf", "SQLFunction")
# subquery expressions (org.apache.spark.sql.catalyst.expressions.SubqueryExpression and the parser's forms)
SUBQUERY_NODES = ("ScalarSubquery", "Exists", "ListQuery", "InSubquery", "LateralSubquery",
                  "FunctionTableSubqueryArgumentExpression", "UnresolvedTableValuedFunction")

_TOKEN = r"""
    (?P<space>\s+)
  | (?P<line_comment>--[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<string>[rR]'[^']*'|[rR]"[^"]*"|STRINGS)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<pipe>\|>)
  | (?P<other>.)
"""
# a string literal: a backslash escapes the next character, unless spark.sql.parser.escapedStringLiterals
# (a Spark setting a pipeline may set): the text is read both ways
_STRINGS = {True: r"'(?:[^'\\]|\\.)*'" + "|" + r'"(?:[^"\\]|\\.)*"', False: r"'[^']*'" + "|" + r'"[^"]*"'}
_TOKENS = {escapes: re.compile(_TOKEN.replace("STRINGS", strings), re.VERBOSE | re.DOTALL)
           for escapes, strings in _STRINGS.items()}


def _skip_block_comment(text: str, i: int) -> int:
    """The index after the (nested) bracketed comment that opens at ``i``."""
    depth, i = 1, i + 2
    while depth and i < len(text):
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*/", i):
            depth, i = depth - 1, i + 2
        else:
            i += 1
    return i


def tokens(text: str, escapes: bool = True) -> list[tuple[str, str]]:
    """(kind, value) of ``text``'s significant tokens: ``name`` (a word), ``quoted`` (a back-quoted
    identifier, unquoted), ``string`` (a literal, its quote kept as the first character), ``pipe``, or
    ``other`` (one character); white space and comments dropped. ``escapes``: a backslash in a
    string literal escapes the next character (Spark's default)."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        m = _TOKENS[escapes].match(text, i)
        assert m is not None  # ``other`` matches any character
        kind, value = m.lastgroup or "other", m.group()
        if kind == "block_comment":
            i = _skip_block_comment(text, i)
            continue
        i = m.end()
        if kind in ("space", "line_comment"):
            continue
        if kind == "quoted":
            out.append(("quoted", value[1:-1].replace("``", "`")))
        elif kind == "word":
            out.append(("name", value))
        else:
            out.append((kind, value))
    return out


def refusal(text: str) -> str | None:
    """Why the Spark SQL expression ``text`` may not be evaluated by the stage job, or None."""
    return _refusal(tokens(text, escapes=True)) or _refusal(tokens(text, escapes=False))


def _refusal(toks: list[tuple[str, str]]) -> str | None:
    for j, (kind, value) in enumerate(toks):
        after = toks[j + 1] if j + 1 < len(toks) else ("", "")
        before = toks[j - 1] if j else ("", "")
        called = after == ("other", "(")
        # a function's name: a word, a back-quoted or (ANSI) double-quoted identifier before "("
        name = value[1:-1] if kind == "string" and value.startswith('"') and called else value
        if kind in ("name", "quoted", "string") and called and name.lower() in REFUSED_FUNCTIONS:
            return (f"calls {name}(), which runs Java code of the driver, reads a file it names or hides a "
                    f"function's name in a string; an expression of a pipeline may use Spark's built-in "
                    f"functions over the record only")
        if kind == "pipe":
            return "holds a query (the |> pipe); an expression of a pipeline cannot read tables or files"
        if kind != "name" or before == ("other", "."):
            continue
        word = value.lower()
        if word in QUERY_WORDS or (word == "from" and before == ("other", "(")):
            return (f"holds a query or a script ({value.upper()}); an expression of a pipeline cannot read "
                    f"tables or files nor run commands (write a column named {value} as `{value}`)")
    return None


def _node_refusal(name: str, node) -> str | None:
    if any(name.startswith(s) for s in SUBQUERY_NODES):
        return f"holds a subquery ({name}); an expression of a pipeline cannot read tables or files"
    if name == "UnresolvedFunction":
        fn = str(node.nameParts().last()).lower()
        if fn in REFUSED_FUNCTIONS:
            return (f"calls {fn}(), which runs Java code of the driver, reads a file it names or hides a "
                    f"function's name in a string")
    for s in REFUSED_NODES:
        if s in name:
            return (f"holds {name}: Java code through reflection, a function that is not one of Spark's "
                    f"built-ins, or a file read")
    return None


def tree_refusal(jexpr) -> str | None:
    """Why one of the nodes of the JVM expression tree ``jexpr`` (a py4j object of Spark's
    ``Expression``) is refused, or None. A subquery's own plan is not entered: it is refused."""
    stack = [jexpr]
    while stack:
        node = stack.pop()
        why = _node_refusal(str(node.getClass().getSimpleName()), node)
        if why:
            return why
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return None


def job_refusal(df, text: str) -> str | None:
    """In the stage job: why Spark's own parse of ``text``, then its analysis over the columns of
    the DataFrame ``df``, holds a refused node (``tree_refusal``), or None. Text that Spark cannot
    parse or analyze is left to the caller's own error (nothing of it can run)."""
    try:
        parsed = df.sparkSession._jsparkSession.sessionState().sqlParser().parseExpression(text)
    except Exception:  # noqa: BLE001 - py4j's ParseException: the caller's evaluation names it
        return None
    why = tree_refusal(parsed)
    if why:
        return why
    try:
        analyzed = df.selectExpr(text)._jdf.queryExecution().analyzed().expressions()
    except Exception:  # noqa: BLE001 - an AnalysisException: the caller's evaluation names it
        return None
    for i in range(analyzed.size()):
        why = tree_refusal(analyzed.apply(i))
        if why:
            return why
    return None
