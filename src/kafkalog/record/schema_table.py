"""A compact text form of Kafka's message schemas (the JSON of ``common/message``), read and written here.

``kraft_schemas`` holds the KRaft record schemas in this form; ``tools/gen_kraft_schemas.py`` writes it from
Kafka's JSON with :func:`format_messages`, and :func:`parse_messages` turns it back into the dicts the generator
used to print (what ``kraft.py`` interprets): one dict per message with ``name``, ``validVersions``,
``flexibleVersions``, ``fields`` and, where present, ``apiKey`` and ``commonStructs``; one dict per field with
``name``, ``type``, ``versions`` and, where present, ``nullableVersions``, ``taggedVersions``,
``flexibleVersions``, ``tag``, ``default``, ``ignorable`` and ``fields``.

The form, one line per message or field, nesting by two spaces of indentation::

    3 PartitionRecord 0-2 flexible=0+          <- [api key] name validVersions [flexible=R]
      PartitionId int32 default=-1             <- name type [R] [nullable[=R]] [tag=N] [tagged=R] [flexible=R]
      Directories []uuid 1+                    <-    [default=TEXT] [ignorable]
      LastKnownElr []int32 2+ nullable tag=2 default=null
      struct Voter                             <- a common struct; its fields follow one level deeper

A version range R is Kafka's text: ``N``, ``N-M`` or ``N+``. A field's versions are ``0+`` unless given; a bare
``nullable`` is nullable at the field's versions, and ``tag=N`` is tagged at the field's versions unless
``tagged=R`` says otherwise. Ranges are inclusive tuples, 32767 standing for an open end, as in the dicts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_HIGHEST", "format_messages", "format_versions", "parse_messages", "parse_versions"]

NO_HIGHEST = 0x7FFF  # Short.MAX_VALUE: an open range "N+"
_ALL = (0, NO_HIGHEST)
_INDENT = "  "
_COMMON = "struct"
_FIELD_WORDS = ("nullable", "tagged", "flexible", "tag", "default", "ignorable")

Spec = dict[str, Any]
Versions = tuple[int, int]


def parse_versions(text: str) -> Versions:
    """Kafka's Versions.parse for a range that is not "none": "N", "N+" or "N-M" as (lowest, highest)."""
    if text.endswith("+"):
        return int(text[:-1]), NO_HIGHEST
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def format_versions(versions: Versions) -> str:
    """The inverse of :func:`parse_versions`."""
    low, high = versions
    if high == NO_HIGHEST:
        return f"{low}+"
    return str(low) if low == high else f"{low}-{high}"


def _parse_field(words: list[str]) -> Spec:
    name, kind, *attrs = words
    versions = _ALL
    options: dict[str, str] = {}
    for attr in attrs:
        if attr[0].isdigit():
            versions = parse_versions(attr)
            continue
        word, _, value = attr.partition("=")
        if word not in _FIELD_WORDS:
            raise ValueError(f"Schema field {name}: unknown attribute {attr!r}")
        options[word] = value
    spec: Spec = {"name": name, "type": kind, "versions": versions}
    if "nullable" in options:
        spec["nullableVersions"] = _range_or(options["nullable"], versions)
    if "tag" in options or "tagged" in options:
        spec["taggedVersions"] = _range_or(options.get("tagged", ""), versions)
    if "flexible" in options:
        spec["flexibleVersions"] = parse_versions(options["flexible"])
    if "tag" in options:
        spec["tag"] = int(options["tag"])
    if "default" in options:
        spec["default"] = options["default"]
    if "ignorable" in options:
        spec["ignorable"] = True
    return spec


def _range_or(text: str, versions: Versions) -> Versions:
    return parse_versions(text) if text else versions


def _parse_message(words: list[str]) -> Spec:
    api_key = int(words.pop(0)) if words[0].isdigit() else None
    name, valid, *attrs = words
    flexible = None
    for attr in attrs:
        word, _, value = attr.partition("=")
        if word != "flexible":
            raise ValueError(f"Schema {name}: unknown attribute {attr!r}")
        flexible = parse_versions(value)
    spec: Spec = {"name": name, "validVersions": parse_versions(valid), "flexibleVersions": flexible, "fields": []}
    if api_key is not None:
        spec["apiKey"] = api_key
    return spec


def parse_messages(text: str) -> list[Spec]:
    """The message specs written in ``text`` (see the module docstring), in their order."""
    messages: list[Spec] = []
    # parents[d] holds what a line at depth d + 1 belongs to: the message, a field or a common struct's list
    parents: list[Spec | list[Spec]] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        depth = (len(line) - len(line.lstrip(" "))) // len(_INDENT)
        if depth > len(parents):
            raise ValueError(f"Schema line indented too far: {line!r}")
        if depth == 0:
            messages.append(_parse_message(words))
            parents = [messages[-1]]
            continue
        del parents[depth:]
        parent = parents[-1]
        if words[0] == _COMMON:
            parents.append(messages[-1].setdefault("commonStructs", {}).setdefault(words[1], []))
            continue
        spec = _parse_field(words)
        (parent if isinstance(parent, list) else parent.setdefault("fields", [])).append(spec)
        parents.append(spec)
    return messages


def _format_field(spec: Spec, depth: int) -> list[str]:
    versions = spec["versions"]
    words = [spec["name"], spec["type"]]
    if versions != _ALL:
        words.append(format_versions(versions))
    nullable = spec.get("nullableVersions")
    if nullable is not None:
        words.append("nullable" if nullable == versions else "nullable=" + format_versions(nullable))
    if "tag" in spec:
        words.append(f"tag={spec['tag']}")
    tagged = spec.get("taggedVersions")
    if tagged is not None and (tagged != versions or "tag" not in spec):
        words.append("tagged=" + format_versions(tagged))
    if "flexibleVersions" in spec:
        words.append("flexible=" + format_versions(spec["flexibleVersions"]))
    if "default" in spec:
        if any(char.isspace() for char in spec["default"]):
            raise ValueError(f"Schema field {spec['name']}: default {spec['default']!r} has white space")
        words.append("default=" + spec["default"])
    if spec.get("ignorable"):
        words.append("ignorable")
    lines = [_INDENT * depth + " ".join(words)]
    for child in spec.get("fields", ()):
        lines += _format_field(child, depth + 1)
    return lines


def format_messages(messages: list[Spec]) -> str:
    """The text form of message specs (the inverse of :func:`parse_messages`)."""
    lines = []
    for message in messages:
        words = [message["name"], format_versions(message["validVersions"])]
        if "apiKey" in message:
            words.insert(0, str(message["apiKey"]))
        if message["flexibleVersions"] is not None:
            words.append("flexible=" + format_versions(message["flexibleVersions"]))
        lines.append(" ".join(words))
        for spec in message["fields"]:
            lines += _format_field(spec, 1)
        for name, fields in message.get("commonStructs", {}).items():
            lines.append(f"{_INDENT}{_COMMON} {name}")
            for spec in fields:
                lines += _format_field(spec, 2)
    return "\n".join(lines) + "\n"
