"""What ships: the licence and metadata, an sdist carrying everything the docs link, the man
page rendered by groff and the shell completions, all built and run with the real tools."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.harness import ROOT

MAN = ROOT / "man" / "gputop.1"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    code = (
        "import sys; from hatchling.builders.sdist import SdistBuilder;"
        "from hatchling.builders.wheel import WheelBuilder;"
        "[print(p) for b in (SdistBuilder, WheelBuilder)"
        " for p in b('.').build(directory=sys.argv[1])]"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    paths = [Path(p) for p in r.stdout.split()]
    return {
        "sdist": next(p for p in paths if p.name.endswith(".tar.gz")),
        "wheel": next(p for p in paths if p.name.endswith(".whl")),
    }


def _sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tf:
        return {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}


def _doc_links() -> set[str]:
    """Relative paths that README.md and docs/*.md link to, from the repository root."""
    targets = set()
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for link in LINK.findall(md.read_text()):
            if "://" in link or link.startswith("mailto:"):
                continue
            targets.add(str((md.parent / link).resolve().relative_to(ROOT)))
    return targets


def test_sdist_carries_every_file_the_docs_link_and_the_licence(dists: dict[str, Path]) -> None:
    names = _sdist_names(dists["sdist"])
    links = _doc_links()
    assert {"docs/prometheus.md", "LICENSE"} <= links | names
    for target in sorted(links):
        assert target in names or any(n.startswith(target + "/") for n in names), target
    for must in ("LICENSE", "man/gputop.1", "completions/gputop.bash", "completions/_gputop"):
        assert must in names
    assert not any("/build/" in n or "__pycache__" in n for n in names)


def test_metadata_licence_classifiers_and_licence_file(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = zf.read(meta_name).decode()
        names = zf.namelist()
    assert "License-Expression: MIT" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    classifiers = [
        line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Classifier: ")
    ]
    assert "Environment :: Console" in classifiers
    assert not any("Curses" in c for c in classifiers)
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    for data in (
        "share/man/man1/gputop.1",
        "share/bash-completion/completions/gputop",
        "share/zsh/site-functions/_gputop",
    ):
        assert any(n.endswith(".data/data/" + data) for n in names), data


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff")
def test_man_page_renders_without_a_warning() -> None:
    r = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z", str(MAN)], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = subprocess.run(["groff", "-man", "-Tutf8", str(MAN)], capture_output=True, text=True)
    plain = re.sub(r".\x08", "", r.stdout)
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS"):
        assert re.search(rf"^{section}$", plain, re.M), section


def test_completions_are_generated_from_the_current_parser() -> None:
    r = subprocess.run(
        [sys.executable, "scripts/make_completions.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _bash_complete(*words: str) -> list[str]:
    script = (
        f"source {ROOT / 'completions' / 'gputop.bash'}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_gputop; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return r.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_completes_commands_and_each_commands_options(tmp_path: Path) -> None:
    assert _bash_complete("gputop", "ex") == ["export"]
    assert "--listen" in _bash_complete("gputop", "export", "--l")
    assert "--listen" not in _bash_complete("gputop", "record", "--l")
    assert _bash_complete("gputop", "--no-") == ["--no-bpf", "--no-redact"]
    (tmp_path / "bundle.json").write_text("{}")
    assert _bash_complete("gputop", "--replay", str(tmp_path / "bun")) == [
        str(tmp_path / "bundle.json")
    ]
    assert _bash_complete("gputop", "--interval", "") == []
