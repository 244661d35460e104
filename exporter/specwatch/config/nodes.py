"""The building blocks of the config schema: a Key (one value), a Section (a mapping parsed into a
dataclass) and Items (a list of sections). config/schema.py is the table made of them.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any

from specwatch.config.kinds import Kind

ENV_PREFIX = "SPECWATCH_"


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
