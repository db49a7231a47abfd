"""docs/cli.md is generated from the commands' keys (libreyolo/cli/reference.py) and must match."""

from __future__ import annotations

from pathlib import Path

from libreyolo.cli.reference import markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"


def test_committed_cli_page_matches_the_keys() -> None:
    assert DOC.read_text() == markdown(), "regenerate: python3 -m libreyolo.cli.reference > docs/cli.md"


def test_page_lists_every_command_and_key() -> None:
    from libreyolo.cli.commands import COMMANDS

    text = markdown()
    for cmd in COMMANDS.values():
        assert f"## `libreyolo {cmd.name}`" in text
        for name in cmd.keys() or {}:
            assert f"| `{name}` |" in text, (cmd.name, name)
