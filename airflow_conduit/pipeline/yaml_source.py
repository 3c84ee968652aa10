"""Read a YAML document and remember where each key is, so problems can name their line.

PyYAML silently keeps the last of two equal keys; a spec with ``format:`` twice
is almost always a mistake, so duplicates are reported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple  # key path as a tuple of str (mapping keys) and int (list indexes)


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
    def __init__(self, message: str, line: int | None):
        super().__init__(message)
        self.line = line


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
    """Parse one YAML document with the safe loader; raise YamlSyntaxError with the line on bad YAML."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or str(exc)
        context = f" ({exc.context})" if exc.context else ""
        line = mark.line + 1 if mark else None
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlSyntaxError(f"not valid YAML{where}: {problem}{context}", line) from exc
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"not valid YAML: {exc}", None) from exc
    finally:
        loader.dispose()
    doc = YamlDocument(data)
    if node is not None:
        _walk(node, (), doc)
    return doc
