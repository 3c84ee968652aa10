"""Read a YAML document and remember where each key is, so problems can name their line.

PyYAML silently keeps the last of two equal keys; a spec with ``format:`` twice
is almost always a mistake, so duplicates are reported here.

A spec is small, so the reader refuses what no spec needs and what would hang or crash
the reader (docs/sources.md, "Limits"): text over ``MAX_SPEC_CHARS``, nesting deeper
than ``MAX_DEPTH``, and aliases that expand the document past ``MAX_VALUES`` values
(the "billion laughs": 390 bytes that expand to a billion strings) or into a cycle.
Depth is checked on the parser's event stream (PyYAML's parser is iterative, its
composer and constructor are recursive), expansion on the composed node graph
(aliases are shared nodes there, so counting with memoization costs nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple  # key path as a tuple of str (mapping keys) and int (list indexes)

MAX_SPEC_CHARS = 1_000_000  # a spec is a few kilobytes; 1 MB leaves room for inline schemas and SQL
MAX_DEPTH = 64  # nested mappings/lists, aliases expanded (a spec needs fewer than 10)
MAX_VALUES = 100_000  # values (scalars, lists, mappings) once aliases are expanded
SHOWN_PATH_PARTS = 8  # a too-deep key path is named by its first parts


@dataclass
class YamlDocument:
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)  # key path -> 1-based line
    duplicates: list[tuple[Path, int]] = field(default_factory=list)  # (path of the repeated key, its line)

    def line(self, path: Path) -> int | None:
        """Line of ``path`` or of its nearest known parent."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


class YamlSyntaxError(ValueError):
    def __init__(self, message: str, line: int | None, key_path: Path = ()):
        super().__init__(message)
        self.line = line
        self.key_path = tuple(key_path)


class YamlLimitError(YamlSyntaxError):
    """Valid YAML that no spec needs and that would hang or crash the reader (size, depth, alias expansion)."""


class _PathTracker:
    """The key path of the node the parser is at, from the event stream (no recursion)."""

    def __init__(self) -> None:
        # per open collection: [is_mapping, next index or current key, expecting a mapping key]
        self.stack: list[list[Any]] = []

    def path(self) -> Path:
        return tuple(entry[1] for entry in self.stack if entry[1] is not None)

    def node(self, event: yaml.Event) -> None:
        """A node starts (scalar, alias or collection): update the parent's position."""
        if not self.stack:
            return
        parent = self.stack[-1]
        if parent[0]:  # mapping
            if parent[2]:  # this node is a key
                parent[1] = event.value if isinstance(event, yaml.ScalarEvent) else "?"
            parent[2] = not parent[2]
        else:
            parent[1] = 0 if parent[1] is None else parent[1] + 1

    def open(self, mapping: bool) -> None:
        self.stack.append([mapping, None, True])

    def close(self) -> None:
        self.stack.pop()


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before the recursive composer sees it."""
    tracker = _PathTracker()
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            tracker.node(event)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1
                raise YamlLimitError(
                    f"nested more than {MAX_DEPTH} levels deep at line {line}; a pipeline spec needs far fewer",
                    line,
                    tracker.path()[:SHOWN_PATH_PARTS],
                )
            tracker.open(isinstance(event, yaml.MappingStartEvent))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            tracker.close()


def _children(node: yaml.Node) -> list[tuple[Any, yaml.Node, int]]:
    """(key or index, child node, line of the key or item) of a collection node."""
    if isinstance(node, yaml.MappingNode):
        out = []
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node)
            out.append((key, key_node, key_node.start_mark.line + 1))
            out.append((key, value_node, key_node.start_mark.line + 1))
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(index, item, item.start_mark.line + 1) for index, item in enumerate(node.value)]
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse alias cycles and alias expansion beyond MAX_VALUES values or MAX_DEPTH levels, naming where."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    first_path: dict[int, Path] = {id(root): ()}
    grey: set[int] = set()
    stack: list[tuple[yaml.Node, Path, bool]] = [(root, (), False)]
    while stack:
        node, path, done = stack.pop()
        key = id(node)
        if done:
            kids = [child for _, child, _ in _children(node)]
            sizes[key] = 1 + sum(sizes[id(child)] for child in kids)
            depths[key] = 1 + max((depths[id(child)] for child in kids), default=0)
            grey.discard(key)
            continue
        if key in sizes:
            continue
        grey.add(key)
        stack.append((node, path, True))
        for name, child, line in reversed(_children(node)):
            if id(child) in grey:
                raise YamlLimitError(f"a YAML alias at line {line} refers to a value that contains it (a cycle)", line, path + (name,))
            first_path.setdefault(id(child), path + (name,))
            if id(child) not in sizes:
                stack.append((child, path + (name,), False))
    if sizes[id(root)] <= MAX_VALUES and depths[id(root)] <= MAX_DEPTH:
        return
    # Name where it blows up: follow the biggest value while it is written there (not an alias to elsewhere).
    node, path, line = root, (), 1
    while True:
        candidates = [(name, child, at) for name, child, at in _children(node)]
        if not candidates:
            break
        name, child, at = max(candidates, key=lambda c: (sizes[id(c[1])], depths[id(c[1])]))
        if sizes[id(child)] <= MAX_VALUES and depths[id(child)] <= MAX_DEPTH:
            break
        path = path + (name,)
        if first_path.get(id(child)) != path:  # an alias: this is where the expansion is used
            if isinstance(node, yaml.MappingNode):
                line = at  # the key's line (an aliased item's own mark is its anchor's)
            break
        node, line = child, at
    if sizes[id(root)] > MAX_VALUES:
        problem = f"YAML aliases expand the document to more than {MAX_VALUES:,} values"
    else:
        problem = f"YAML aliases nest the document more than {MAX_DEPTH} levels deep"
    raise YamlLimitError(f"{problem} (expanded here, line {line}); refusing it: a spec needs far fewer", line, path)


def _walk(node: yaml.Node, path: Path, doc: YamlDocument) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node)
            child = path + (key,)
            line = key_node.start_mark.line + 1
            if key in seen:
                doc.duplicates.append((child, line))
            else:
                seen.add(key)
                doc.lines[child] = line
            _walk(value_node, child, doc)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = path + (index,)
            doc.lines[child] = item.start_mark.line + 1
            _walk(item, child, doc)


def load_yaml(text: str) -> YamlDocument:
    """Parse one YAML document with the safe loader; raise YamlSyntaxError with the line on bad YAML.

    YamlLimitError (a YamlSyntaxError) refuses text, nesting or alias expansion beyond the limits.
    """
    if len(text) > MAX_SPEC_CHARS:
        raise YamlLimitError(f"the spec is {len(text):,} characters long; the limit is {MAX_SPEC_CHARS:,}", None)
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters (NUL) at once
        _check_depth(text)
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node)
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:  # the checks above should make this unreachable; never a traceback
        raise YamlLimitError(f"the document nests too deeply to read (limit {MAX_DEPTH} levels)", None) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or str(exc)
        context = f" ({exc.context})" if exc.context else ""
        line = mark.line + 1 if mark else None
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlSyntaxError(f"not valid YAML{where}: {problem}{context}", line) from exc
    except yaml.reader.ReaderError as exc:  # no mark: the position is a character offset
        line = text.count("\n", 0, exc.position) + 1
        raise YamlSyntaxError(f"not valid YAML at line {line}: control character #x{exc.character:04x} is not allowed", line) from exc
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"not valid YAML: {exc}", None) from exc
    finally:
        if loader is not None:
            loader.dispose()
    doc = YamlDocument(data)
    if node is not None:
        _walk(node, (), doc)
    return doc
