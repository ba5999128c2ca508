"""The man page names every command and option of the real parser."""

from __future__ import annotations

import argparse
import re

from gputop.cli import build_parser
from tests.harness import ROOT

MAN = ROOT / "man" / "gputop.1"


def _all_parsers() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    out = {"": p}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            out.update(a.choices)
    return out


def test_man_page_names_every_command_and_option_of_the_parser() -> None:
    text = MAN.read_text().replace("\\-", "-")
    for name, parser in _all_parsers().items():
        if name:
            assert re.search(rf"^\.B {name}\b|^\.B gputop {name}\b", text, re.M), name
        for a in parser._actions:
            for opt in a.option_strings:
                assert opt in text, f"{name or 'gputop'} {opt} is not in the man page"
