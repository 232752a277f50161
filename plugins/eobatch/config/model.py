"""The building blocks of the pipeline YAML's typed models (pydantic v2): a section model that
refuses unknown keys naming what is allowed, field types that check a value with the product's own
wording and describe it in the JSON Schema, and the conversion of a validation error into a
``ConfigError`` that names the file and the key path (``sink.merge.keys``, ``expectations[1].name``).

``config`` defines the pipeline's sections with them, each source and sink kind its own
(``sources/<kind>/config.py``, ``sinks/<kind>/config.py``). Pure Python, no Airflow, no pyspark;
it imports no registry, so a kind's config module can import it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ..errors import ConfigError, Invalid

M = TypeVar("M", bound=BaseModel)


class Section(BaseModel):
    """One mapping of the YAML. Its keys are its fields' names (or aliases); any other key is an
    error naming the allowed ones. ``NULL`` says what null is: ``empty`` (null, absent or empty is
    ``{}``), ``required`` ("is required") or ``invalid`` (``NOT_A_MAPPING``, the error of a value
    that is not a mapping)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, arbitrary_types_allowed=True)
    NULL: ClassVar[str] = "empty"
    NOT_A_MAPPING: ClassVar[str] = "must be a mapping"

    @classmethod
    def yaml_keys(cls) -> frozenset[str]:
        """The keys this mapping may hold."""
        return frozenset(f.alias or n for n, f in cls.model_fields.items())

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if data is None and cls.NULL == "required":
            raise Invalid("is required")
        if not data and cls.NULL == "empty":
            data = {}
        if not isinstance(data, dict):
            raise Invalid(cls.NOT_A_MAPPING)
        allowed = cls.yaml_keys()
        extra = sorted(set(data) - allowed)
        if extra and cls.model_config.get("extra") == "forbid":  # each one an error, with the section's others
            return {**data, **{k: Unknown(allowed) for k in extra}}
        if extra:
            raise Invalid(f"unknown key (allowed: {', '.join(sorted(allowed))})", at=str(extra[0]))
        return data


@dataclass(frozen=True)
class Unknown:
    """The value of an unknown key of a section (``Section._known_keys``): pydantic reports it as an
    extra key beside the section's other errors; ``config_error`` names the keys it allows."""

    allowed: frozenset[str]


@dataclass(frozen=True)
class Check:
    """Field metadata (``Annotated[T, Check(check, schema)]``): the value is ``check(value)`` (or
    ``check(value, info)``), which refuses with ``Invalid`` (or a ``ConfigError``); the JSON
    Schema describes it as ``schema``."""

    check: Callable[..., Any]
    schema: dict = field(hash=False)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return PlainValidator(self.check).__get_pydantic_core_schema__(source, handler)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return WithJsonSchema(self.schema).__get_pydantic_json_schema__(schema, handler)


def required(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` of a key whose null is "is required" (an absent key is pydantic's ``missing``)."""
    def run(v: Any) -> Any:
        if v is None:
            raise Invalid("is required")
        return check(v)
    return run


def context_file(info: ValidationInfo) -> str:
    """The file being loaded (``validate``'s context), for the checks that raise ConfigError."""
    return (info.context or {})["file"]


def validate(model: type[M], data: Any, file: str, prefix: str = "", context: dict | None = None) -> M:
    """``data`` (the YAML's mapping at key ``prefix``) as ``model``; its problems, all of them, raise
    one ConfigError naming ``file`` and each key path (``ConfigError.problems``), in the order of
    the mapping's keys."""
    try:
        return model.model_validate(data, context={**(context or {}), "file": file})
    except ValidationError as e:
        raise config_error(e, file, prefix, order=list(data) if isinstance(data, dict) else ()) from None


def config_error(e: ValidationError, file: str, prefix: str = "", order: list | tuple = ()) -> ConfigError:
    """Every error of ``e`` as one ConfigError of ``file`` (``ConfigError.of``), each located below
    ``prefix``, in the order of the keys ``order`` (the YAML mapping's) where they are among them."""
    errors = [one_error(err, file, prefix) for err in e.errors()]
    rank = {str(k): i for i, k in enumerate(order)}

    def place(p: ConfigError) -> int:
        top = p.key.removeprefix(prefix).lstrip(".").split(".")[0].split("[")[0]
        return rank.get(top, len(rank))

    return ConfigError.of(sorted((p for x in errors for p in x.problems), key=place))


def one_error(err: Any, file: str, prefix: str = "") -> ConfigError:
    """One error of a ValidationError (``errors()``) as a ConfigError of ``file``."""
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    key = key_path(prefix, err["loc"])
    if isinstance(cause, Invalid):
        if cause.key is not None:
            return ConfigError(file, cause.key, cause.message)
        return ConfigError(file, key_path(key, (cause.at,)) if cause.at else key, cause.message)
    if err["type"] == "missing":
        return ConfigError(file, key, "is required")
    if err["type"] == "extra_forbidden" and isinstance(err.get("input"), Unknown):
        return ConfigError(file, key, f"unknown key (allowed: {', '.join(sorted(err['input'].allowed))})")
    return ConfigError(file, key, f"{err['msg']}, got {err.get('input')!r}")


def key_path(prefix: str, loc: tuple) -> str:
    """``prefix`` and a pydantic location as the YAML's key path: ``a.b[2].c``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("["):
            out += str(part)
        else:
            out += ("." if out else "") + str(part)
    return out


# -- values -----------------------------------------------------------------------------------

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
CONN_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def pos_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise Invalid(f"must be a positive integer, got {v!r}")
    return v


def non_negative_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise Invalid(f"must be a non-negative integer, got {v!r}")
    return v


def conn_id(v: Any) -> str:
    """An Airflow connection id (the YAML names connections, never their secrets)."""
    if not (isinstance(v, str) and CONN_ID_RE.match(v)):
        raise Invalid(f"must be an Airflow connection id, got {v!r}")
    return v


def table_path(v: Any) -> str:
    """A local absolute path or an s3a:// URI, in one spelling (what Spark reads)."""
    if not isinstance(v, str) or not v.strip():
        raise Invalid("must be a path or s3a:// URI")
    v = v.strip()
    if v.startswith(("s3a://", "s3://")):
        if not re.fullmatch(r"s3a?://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/[^\s]*)?", v):
            raise Invalid(f"{v!r} is not a valid s3a://bucket/prefix URI")
        return "s3a://" + v.split("://", 1)[1].rstrip("/")
    if "://" in v:
        raise Invalid(f"unsupported scheme in {v!r} (use a local path or s3a://)")
    if not os.path.isabs(v):
        raise Invalid(f"{v!r} must be an absolute path")
    return os.path.normpath(v)


def one_of(*allowed: Any) -> Check:
    """The check of a value that is one of ``allowed``: "'x' must be one of a, b"."""
    def check(v: Any) -> Any:
        if v not in allowed:
            raise Invalid(f"{v!r} must be one of {', '.join(map(str, allowed))}")
        return v
    return Check(check, {"enum": list(allowed)})


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise Invalid(f"must be true or false, got {v!r}")
    return v


Bool = Annotated[Any, Check(_bool, {"type": "boolean"})]
PosInt = Annotated[int, Check(pos_int, {"type": "integer", "minimum": 1})]
NonNegativeInt = Annotated[int, Check(non_negative_int, {"type": "integer", "minimum": 0})]
ConnId = Annotated[str, Check(conn_id, {"type": "string", "pattern": CONN_ID_RE.pattern})]
TablePath = Annotated[str, Check(required(table_path), {"type": "string", "description": "an absolute local path or an "
                                                                             "s3a://bucket/prefix URI"})]
