"""scripts/check_docker.py's reader of docker/compose.yaml: the block-style YAML subset the file
uses (mappings, lists, plain and quoted scalars, comments). Python standard library only.
"""

from __future__ import annotations

import json
import re


# ---- compose: a block-style YAML subset ---------------------------------------------------


class YamlSubsetError(Exception):
    pass


def _strip_comment(line: str) -> str:
    quote = None
    escaped = False
    for i, c in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif c == "\\" and quote == '"':
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _split_key(content: str) -> tuple[str, str] | None:
    """`key: value` / `key:` outside quotes and brackets -> (key, value), else None."""
    if content[:1] in "\"'[{":
        return None
    m = re.match(r"^([^\s:#][^:]*?):(?:\s+(.*))?$", content)
    if not m:
        return None
    return m.group(1).strip(), (m.group(2) or "").strip()


def _scalar(text: str, lineno: int):
    if text == "":
        return None
    if text[0] in "&*!|>%@`":
        raise YamlSubsetError(f"line {lineno}: unsupported YAML ({text[:20]!r})")
    if text[0] in "[{\"":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise YamlSubsetError(f"line {lineno}: not JSON-compatible flow/quoted YAML: {e}") from None
    if text[0] == "'":
        if not text.endswith("'") or len(text) < 2:
            raise YamlSubsetError(f"line {lineno}: unterminated single-quoted string")
        return text[1:-1].replace("''", "'")
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if text in ("null", "Null", "NULL", "~"):
        return None
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text):
        return float(text)
    return text


def parse_yaml_subset(text: str):
    """Mappings, block sequences, plain/quoted scalars, JSON-compatible flow collections."""
    lines: list[tuple[int, int, str]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlSubsetError(f"line {n}: tab in indentation")
        content = _strip_comment(raw)
        if not content.strip():
            continue
        if content.strip() in ("---", "..."):
            raise YamlSubsetError(f"line {n}: multi-document YAML is not supported")
        lines.append((n, len(content) - len(content.lstrip()), content.strip()))

    def block(i: int, indent: int):
        n, ind, content = lines[i]
        if content == "-" or content.startswith("- "):
            return seq(i, ind)
        return mapping(i, ind)

    def seq(i: int, indent: int):
        items = []
        while i < len(lines):
            n, ind, content = lines[i]
            if ind < indent:
                break
            if ind > indent:
                raise YamlSubsetError(f"line {n}: unexpected indentation")
            if not (content == "-" or content.startswith("- ")):
                break
            rest = content[1:].strip()
            if rest == "":
                if i + 1 < len(lines) and lines[i + 1][1] > indent:
                    value, i = block(i + 1, lines[i + 1][1])
                else:
                    value, i = None, i + 1
            elif _split_key(rest):
                # `- key: value` then more keys at the item's indentation
                item_indent = ind + 2 + (len(rest) - len(rest.lstrip()))
                lines[i] = (n, item_indent, rest)
                value, i = mapping(i, item_indent)
            else:
                value, i = _scalar(rest, n), i + 1
            items.append(value)
        return items, i

    def mapping(i: int, indent: int):
        out: dict = {}
        while i < len(lines):
            n, ind, content = lines[i]
            if ind < indent:
                break
            if ind > indent:
                raise YamlSubsetError(f"line {n}: unexpected indentation")
            kv = _split_key(content)
            if kv is None:
                if content.startswith("- "):
                    break
                raise YamlSubsetError(f"line {n}: expected `key: value`, got {content!r}")
            key, rest = kv
            if key in out:
                raise YamlSubsetError(f"line {n}: duplicate key {key!r}")
            if rest:
                out[key], i = _scalar(rest, n), i + 1
                continue
            i += 1
            if i < len(lines) and (
                lines[i][1] > indent
                or (lines[i][1] == indent and (lines[i][2] == "-" or lines[i][2].startswith("- ")))
            ):
                out[key], i = block(i, lines[i][1])
            else:
                out[key] = None
        return out, i

    if not lines:
        return None
    value, i = block(0, lines[0][1])
    if i != len(lines):
        raise YamlSubsetError(f"line {lines[i][0]}: unexpected content {lines[i][2]!r}")
    return value
