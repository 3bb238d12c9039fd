"""Sphinx directive ``.. holmes-presets::``: the preset registry rendered as tables at build time.

The tables are generated from :func:`evidential_prvr.presets.holmes_settings`, so the numbers on the
page are the numbers in the code. :func:`render_presets_rst` is plain Python (the test suite calls it);
the directive parses its output as reStructuredText.
"""

from __future__ import annotations

import dataclasses
import math

from evidential_prvr.presets import DATASETS, HolmesSettings, holmes_settings

SECTIONS = ("inter", "transport", "intra", "base", "weights", "schedule", "optimizer", "model")
"""The sections of :class:`~evidential_prvr.presets.HolmesSettings`, in page order."""

TITLES = {
    "inter": "Inter-video evidential learning (§3.2)",
    "transport": "Flexible optimal transport (§3.3, App. B.5)",
    "intra": "Intra-video evidential learning (§3.3)",
    "base": "Basic objectives L_base (App. B.1)",
    "weights": "Loss weights (Eq. 21-22)",
    "schedule": "Schedule (§3.4, §4.2)",
    "optimizer": "Optimiser",
    "model": "Model (§3.1, §4.2, App. A.1)",
}


def columns() -> list[tuple[str, HolmesSettings]]:
    """``(header, settings)`` of every column: the paper without a data set, then paper and release per data set."""
    cols = [("paper", holmes_settings("paper"))]
    cols += [(f"paper {d}", holmes_settings("paper", d)) for d in DATASETS]
    cols += [(f"release {d}", holmes_settings("release", d)) for d in DATASETS]
    return cols


def format_value(value: object) -> str:
    """One table cell: an inline literal of the value as Python writes it (``inf`` for infinity)."""
    if isinstance(value, float) and math.isinf(value):
        return "``inf``"
    if isinstance(value, tuple):
        return "``(" + ", ".join("inf" if isinstance(v, float) and math.isinf(v) else repr(v) for v in value) + ")``"
    return f"``{value!r}``"


def render_presets_rst() -> str:
    """reStructuredText of one ``list-table`` per section, fields as rows and presets as columns."""
    cols = columns()
    lines: list[str] = []
    for section in SECTIONS:
        owner = next(getattr(s, section) for _, s in cols if getattr(s, section) is not None)
        cls = type(owner)
        title = TITLES[section]
        lines += [title, "-" * len(title), "",
                  f"Section ``{section}`` of :class:`~evidential_prvr.presets.HolmesSettings` "
                  f"(:class:`~evidential_prvr.presets.{cls.__name__}`).", "",
                  ".. list-table::", "   :header-rows: 1", "   :stub-columns: 1", ""]
        lines.append("   * - field")
        lines += [f"     - {header}" for header, _ in cols]
        for field in dataclasses.fields(cls):
            lines.append(f"   * - ``{field.name}``")
            for _, settings in cols:
                part = getattr(settings, section)
                lines.append("     - " + ("—" if part is None else format_value(getattr(part, field.name))))
        lines.append("")
    return "\n".join(lines)


def setup(app):  # pragma: no cover - exercised by the Sphinx build
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective
    from sphinx.util.nodes import nested_parse_with_titles

    class HolmesPresets(SphinxDirective):
        has_content = False

        def run(self):
            container = nodes.section()
            container.document = self.state.document
            source = StringList(render_presets_rst().splitlines(), source="holmes-presets")
            nested_parse_with_titles(self.state, source, container)
            return container.children

    app.add_directive("holmes-presets", HolmesPresets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
