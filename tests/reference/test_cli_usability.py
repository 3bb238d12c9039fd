"""What a new user meets on the command line: every option and subcommand has help text, and the demo says where
it writes and keeps an earlier demo."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import pytest

from reference_models import compare
from reference_models.dab import cli as dab_cli
from reference_models.holmes import cli as holmes_cli
from reference_models.hud import cli as hud_cli

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "python -m reference_models.holmes": holmes_cli.build_parser,
    "python -m reference_models.hud": hud_cli.build_parser,
    "python -m reference_models.dab": dab_cli.build_parser,
    "python -m reference_models.compare": compare.build_parser,
}


def walk(parser: argparse.ArgumentParser, prog: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every subcommand's parser below it, each with its command line."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, f"{prog} {name}")


def without_help(parser: argparse.ArgumentParser) -> list[str]:
    """The options, positionals and subcommands of ``parser`` that have no help text."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            missing += [f"subcommand {name}" for name in action.choices if name not in helped]
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append("/".join(action.option_strings) or action.dest)
    return missing


def test_the_walk_finds_an_option_without_help():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run it").add_argument("--task")
    sub.add_parser("report")
    assert [(prog, without_help(p)) for prog, p in walk(parser, "x")] == [
        ("x", ["subcommand report"]), ("x run", ["--task"]), ("x report", [])]


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_option_of_every_command_has_help(prog):
    found = {name: missing for name, parser in walk(PARSERS[prog](), prog) if (missing := without_help(parser))}
    assert found == {}


def test_the_demo_says_where_it_writes_and_keeps_an_earlier_demo(tmp_path, monkeypatch, capsys):
    """Without --output-dir a second demo writes into runs/demo-2; a named folder holding a demo needs --overwrite."""

    def fake_comparison(data_root, collection, feature, config, out, **options):  # trains nothing
        (out / "holmes").mkdir(parents=True, exist_ok=True)
        (out / "holmes" / "best.pt").write_bytes(b"weights")
        return {"seed": options["seed"]}

    monkeypatch.setattr(holmes_cli, "generate_embedded_benchmark", lambda folder, *a, **k: folder.mkdir(parents=True, exist_ok=True))
    monkeypatch.setattr(holmes_cli, "run_comparison", fake_comparison)
    monkeypatch.chdir(tmp_path)
    for expected in ("runs/demo", "runs/demo-2", "runs/demo-3"):
        assert holmes_cli.main(["demo"]) == 0
        assert f"to {expected}\n" in capsys.readouterr().out
        assert (tmp_path / expected / "results.json").is_file()
    first = (tmp_path / "runs/demo/results.json").read_text()
    assert holmes_cli.main(["demo", "--output-dir", "runs/demo", "--seed", "1"]) == 2
    assert "runs/demo already holds a demo; add --overwrite" in capsys.readouterr().err
    assert (tmp_path / "runs/demo/results.json").read_text() == first
    assert holmes_cli.main(["demo", "--output-dir", "runs/demo", "--seed", "1", "--overwrite"]) == 0
    assert '"seed": 1' in (tmp_path / "runs/demo/results.json").read_text()
