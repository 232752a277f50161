"""Which code a pipeline's ``transform: <name>`` runs: the pipeline folder's own, or one shipped.

* **The pipeline's own**: ``transforms/<name>.py`` in the folder of the pipeline's YAML file, so
  that an installed eobatch runs a team's transforms with no checkout. The stage job receives it
  in its code zip as ``pipeline_transforms/<name>.py`` (``contract.OWN_TRANSFORMS``). It is one file: it may
  import pyspark and the standard library, not a sibling file.
* **Shipped** with eobatch: ``spark_jobs/transforms/<name>.py`` (``passthrough``, ...).

A name of both is refused (which one runs would depend on a folder's content). The own file's
SHA-256 is recorded in each plan (the ``transform.code`` key of ``config.contract.PIPELINE_KEYS``): a batch is
staged only by the code it was planned with, and the code zip holds exactly the bytes that were
hashed (``job.launch.pyfiles_zip``). A shipped transform is the installed product's code: its
hash is not recorded (an upgrade does not refuse the batches planned before it).
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass

from ..errors import ConfigError
from ..paths import TRANSFORMS_DIR
from .contract import OWN_TRANSFORMS, SHIPPED_TRANSFORMS
from .model import NAME_RE, Invalid
from .yamlfile import read_bytes

FOLDER = "transforms"  # beside a pipeline's YAML file
DESCRIPTION = f"{FOLDER}/<name>.py beside the pipeline file, or a transform shipped with eobatch"
MAX_TRANSFORM_BYTES = 1 << 20  # a transform is one module of code, not data


@dataclass(frozen=True)
class TransformCode:
    name: str
    file: str | None = None  # the pipeline's own file; None: shipped
    sha256: str | None = None  # of the own file's bytes

    @property
    def module(self) -> str:
        """The module the stage job imports."""
        return f"{OWN_TRANSFORMS if self.file else SHIPPED_TRANSFORMS}.{self.name}"


class ResolvedName(str):
    """A transform's name as loading checked it, carrying the code it names (``code``): the file
    is read, checked and hashed once per load, and what is checked is what is hashed."""

    code: TransformCode


def shipped() -> list[str]:
    """The names of the transforms shipped with eobatch."""
    return sorted(p[:-3] for p in os.listdir(TRANSFORMS_DIR) if p.endswith(".py") and not p.startswith("_"))


def own_folder(pipeline_file: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(pipeline_file)), FOLDER)


def resolve(pipeline_file: str | None, name: object) -> TransformCode:
    """The transform ``name`` of the pipeline in ``pipeline_file`` (None: a shipped one only);
    ``Invalid`` says why not."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise Invalid(f"{name!r} must be a module name: {FOLDER}/<name>.py beside the pipeline file, or a "
                      f"transform shipped with eobatch ({', '.join(shipped())})")
    own = os.path.join(own_folder(pipeline_file), name + ".py") if pipeline_file else ""
    shown = f"{FOLDER}/{name}.py"  # the error's prefix names the pipeline file, beside which it is
    is_shipped = os.path.isfile(os.path.join(TRANSFORMS_DIR, name + ".py"))
    if not os.path.isfile(own):
        if not is_shipped:
            raise Invalid(f"no transform {name!r}: no file {shown} beside the pipeline file, and eobatch "
                          f"ships none of that name ({', '.join(shipped())})")
        return TransformCode(name)
    if is_shipped:
        raise Invalid(f"{shown} has the name of a transform shipped with eobatch: rename the file and the key")
    try:  # a regular file of bounded size: a FIFO or a huge file in the folder never hangs a load
        source = read_bytes(own, MAX_TRANSFORM_BYTES, "a transform file")
    except ConfigError as e:
        raise Invalid(f"{shown} {e.message}") from None
    check_source(source, shown)
    return TransformCode(name, own, hashlib.sha256(source).hexdigest())


def check_source(source: bytes, file: str) -> None:
    """The file compiles and defines ``transform`` at its top level (a def, an assignment or an
    import of that name): the mistakes a DAG parse can report, before a stage job fails on them."""
    try:
        tree = ast.parse(source, file)
    except (SyntaxError, ValueError) as e:
        raise Invalid(f"{file} does not compile: {e}") from None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "transform":
            return
        targets: list[ast.expr] = (node.targets if isinstance(node, ast.Assign)
                                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        if any(isinstance(t, ast.Name) and t.id == "transform" for t in targets):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == "transform" for a in node.names):
            return
    raise Invalid(f"{file} defines no transform(df, ctx) at its top level")
