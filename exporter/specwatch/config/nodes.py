"""The building blocks of the config schema: a Key (one value), a Section (a mapping parsed into a
dataclass) and Items (a list of sections).

The config's keys are declared once, as the fields of the result dataclasses (config/result.py):
`setting(...)` gives a field its kind, default, bounds, doc and example; `section(...)` and
`items(...)` nest a dataclass. `schema_of` reads those fields back as the Section tree that
validation (parse.py), the environment (env.py) and the generated files (tools/) walk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any, TypeVar, dataclass_transform, overload

from specwatch.config.kinds import Kind

ENV_PREFIX = "SPECWATCH_"
_T = TypeVar("_T")
#: The metadata entry of a declared field: a Key, Section or Items still without its name.
_NODE = "specwatch.config"


class _FromResult:
    def __repr__(self) -> str:
        return "<dataclass default>"


FROM_RESULT: Any = _FromResult()


@dataclass(frozen=True)
class Key:
    """One value. `env`: "" derives SPECWATCH_<PATH>, None means no variable, else the name.
    `env_aliases`: older names that set it too (the main name wins when both are set)."""

    name: str
    kind: Kind
    doc: str
    example: Any = None
    nullable: bool = False
    required: bool = False
    env: str | None = ""
    env_aliases: tuple[str, ...] = ()
    # Result fields the parsed value fills, for kinds that parse to a tuple (path, content).
    fields: tuple[str, ...] = ()
    # A default different from the dataclass's (hardware given as a mapping has no preset).
    default: Any = FROM_RESULT
    # A default that depends on other keys, for docs.
    default_doc: str = ""
    chart: bool = True


@dataclass(frozen=True)
class Section:
    """A mapping of keys parsed into the `result` dataclass. `shorthand`: a bare string sets that key;
    `nullable`: the section is optional and off unless given (prometheus: fleet mode)."""

    name: str
    result: type
    keys: tuple[Node, ...]
    doc: str
    shorthand: str | None = None
    # An optional section: absent or null leaves the result field at its default (None).
    nullable: bool = False


@dataclass(frozen=True)
class Items:
    """A list of sections (targets, routes). Item keys have no environment variable, except an
    explicit `env` name, which sets that key of the first item (SPECWATCH_TARGET_URL)."""

    name: str
    item: Section
    doc: str
    min_items: int = 0
    nullable: bool = True
    default_doc: str = ""


Node = Key | Section | Items


@overload
def setting(kind: Kind, doc: str, *, default: _T, **options: Any) -> _T: ...
@overload
def setting(kind: Kind, doc: str, *, default_factory: Callable[[], _T], **options: Any) -> _T: ...
@overload
def setting(kind: Kind, doc: str, **options: Any) -> Any: ...
def setting(
    kind: Kind,
    doc: str,
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    also_fills: str | None = None,
    parsed_default: Any = FROM_RESULT,
    **options: Any,
) -> Any:
    """A config key as a dataclass field: its kind, doc and default, plus Key's options (example,
    nullable, required, env, env_aliases, default_doc, chart). `also_fills`: a second field that the
    kind's (value, content) tuple fills; `parsed_default`: the value a key absent from a given
    mapping takes, when it differs from the field's default."""
    key = Key("", kind, doc, fields=("", also_fills) if also_fills else (), default=parsed_default, **options)
    return field(default=default, default_factory=default_factory, metadata={_NODE: key})


def section(result: type, doc: str, *, shorthand: str | None = None, nullable: bool = False) -> Any:
    """A nested mapping parsed into `result`; absent, it is `result()`, or None when `nullable`."""
    node = Section("", result, schema_of(result).keys, doc, shorthand=shorthand, nullable=nullable)
    return field(default=None if nullable else result(), metadata={_NODE: node})


def items(
    result: type,
    doc: str,
    *,
    item_doc: str,
    default: tuple[Any, ...] = (),
    min_items: int = 0,
    default_doc: str = "",
) -> Any:
    """A list of mappings, each parsed into `result` (`item_doc` says what one item is)."""
    item = Section("", result, schema_of(result).keys, item_doc)
    node = Items("", item, doc, min_items=min_items, default_doc=default_doc)
    return field(default=default, metadata={_NODE: node})


@dataclass_transform(frozen_default=True, field_specifiers=(setting, field))
def declared(cls: type[_T]) -> type[_T]:
    """A frozen dataclass whose `setting` fields are config keys."""
    return dataclass(frozen=True)(cls)


def _named(spec: Field[Any]) -> Node | None:
    node = spec.metadata.get(_NODE)
    if isinstance(node, Key):
        return replace(node, name=spec.name, fields=(spec.name, *node.fields[1:]) if node.fields else ())
    if isinstance(node, Items):
        return replace(node, name=spec.name, item=replace(node.item, name=spec.name))
    if isinstance(node, Section):
        return replace(node, name=spec.name)
    return None


def schema_of(result: type, doc: str = "") -> Section:
    """The Section a declared dataclass stands for: its declared fields, in order (fields without a
    declaration are derived at load time, e.g. a parsed config.json)."""
    keys = tuple(node for spec in fields(result) if (node := _named(spec)) is not None)
    return Section("", result, keys, doc)


def result_fields(key: Key) -> tuple[str, ...]:
    return key.fields or (key.name,)


def default_of(section: Section, node: Node) -> Any:
    """The value a key takes when absent: its own default, else the dataclass field's."""
    if isinstance(node, Key) and node.default is not FROM_RESULT:
        return node.default
    for spec in fields(section.result):
        if spec.name == node.name:
            if spec.default is not MISSING:
                return spec.default
            if spec.default_factory is not MISSING:
                return spec.default_factory()
    return None
