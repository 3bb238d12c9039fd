"""Lines of code of the library and of the reference models, without docstrings, comments and blank lines.

``python benchmarks/code_lines.py`` prints one count per package (the measure of version 3.0's size).
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers that a module's, class's or function's docstring spans."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(path: Path) -> int:
    """Lines of ``path`` that hold a token other than a comment, a docstring or a line break."""
    source = path.read_text(encoding="utf-8")
    skipped = docstring_lines(ast.parse(source))
    code: set[int] = set()
    ignored = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in ignored:
            code.update(line for line in range(token.start[0], token.end[0] + 1) if line not in skipped)
    return len(code)


def main(argv: list[str]) -> int:
    for package in argv or ["evidential_prvr", "reference_models"]:
        files = sorted((ROOT / package).rglob("*.py"))
        print(f"{package}: {sum(code_lines(f) for f in files)} code lines in {len(files)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
