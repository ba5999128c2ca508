"""The offline bundle scripts/gpu_check.sh carries to a GPU machine: wheels and libbpf.

A GPU machine lent for a check has no network and its own Python with PyTorch, but
not gputop's other dependencies, and maybe no libbpf. Built here, carried there in
the git-ignored ``.gpucheck/`` folder:

    python scripts/gpu_bundle.py build            # here, with network: .gpucheck/
    python scripts/gpu_bundle.py install          # there (stdlib only): .gpucheck/site-cpXY
    python scripts/gpu_bundle.py verify --python python3.12   # here: a clean 3.12 runs it

``build`` downloads gputop's runtime dependencies (``pyproject.toml``), with everything
they need, as wheels for CPython 3.10 to 3.13 on x86_64 Linux (the machine's Python is
not known beforehand; most wheels are pure and serve every one), and copies this machine's
``libbpf.so.1`` and the ``libelf.so.1`` it links (Debian 12's libbpf1 and libelf1;
glibc 2.36, so any newer distribution loads them). ``install`` unpacks the running
Python's set of wheels into a private folder (a wheel is a zip of what goes into
site-packages: no pip needed, nothing of the machine's Python changed); gputop's
processes get it first on ``PYTHONPATH``, PyTorch's never do. ``verify`` installs the
bundle into a fresh virtual environment of another interpreter and runs ``gputop
doctor`` and a demo ``gputop record`` there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / ".gpucheck"
# The Pythons a GPU machine may run PyTorch with (pyproject.toml: 3.10 and newer).
TARGET_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# Newest first; pip takes any of these (py3-none-any needs none).
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
LIBS = ("libbpf.so.1", "libelf.so.1")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")


class BundleError(Exception):
    """What stops a bundle step, in one line."""


def runtime_requirements(
    python_version: str, pyproject: Path = ROOT / "pyproject.toml"
) -> list[str]:
    """gputop's runtime dependencies on that Python (those whose marker says so)."""
    import tomllib
    from packaging.requirements import Requirement

    env = {"python_version": python_version, "python_full_version": f"{python_version}.0"}
    out = []
    for dep in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        req = Requirement(dep)
        if req.marker is None or req.marker.evaluate(env):
            req.marker = None
            out.append(str(req))
    return out


def build(out: Path, python_versions: tuple[str, ...] = TARGET_PYTHONS) -> dict[str, Any]:
    """Download the wheels for each Python and copy the libraries into ``out``; returns
    the manifest (which wheels make each Python's set: a pure wheel serves several)."""
    wheels = out / "wheels"
    libs = out / "lib"
    for d in (wheels, libs):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    sets = {}
    for version in python_versions:
        with tempfile.TemporaryDirectory(prefix="gpucheck-wheels-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet"]
            cmd += ["--disable-pip-version-check", "--only-binary=:all:"]
            cmd += ["--implementation", "cp", "--python-version", version]
            for p in PLATFORMS:
                cmd += ["--platform", p]
            cmd += ["-d", tmp, *runtime_requirements(version)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise BundleError(f"pip download for Python {version} failed: {tail}")
            got = sorted(p.name for p in Path(tmp).glob("*.whl"))
            for name in got:
                if not (wheels / name).exists():
                    shutil.move(Path(tmp) / name, wheels / name)
            sets[version] = got
    for name in LIBS:
        src = next((Path(d) / name for d in LIB_DIRS if (Path(d) / name).exists()), None)
        if src is None:
            raise BundleError(f"{name} not found here (install Debian's libbpf1 and libelf1)")
        shutil.copy2(src.resolve(), libs / name)
    manifest = {"wheels": sets, "libs": list(LIBS), "digest": _digest(wheels)}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _digest(wheels: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(wheels.glob("*.whl")):
        h.update(p.name.encode())
        h.update(str(p.stat().st_size).encode())
    return h.hexdigest()[:16]


def site_dir(bundle: Path) -> Path:
    """Where ``install`` unpacks the wheels for the running interpreter."""
    return bundle / f"site-cp{sys.version_info.major}{sys.version_info.minor}"


def install(bundle: Path, site: Path | None = None) -> Path:
    """Unpack every wheel of the bundle into ``site`` (once per bundle); returns it."""
    manifest_path = bundle / "MANIFEST.json"
    if not manifest_path.exists():
        raise BundleError(f"no bundle in {bundle}: run `python scripts/gpu_bundle.py build` first")
    manifest = json.loads(manifest_path.read_text())
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if here not in manifest["wheels"]:
        pythons = ", ".join(manifest["wheels"])
        raise BundleError(f"the bundle is for Python {pythons}, this is {here}")
    site = site or site_dir(bundle)
    stamp = site / ".installed"
    if stamp.exists() and stamp.read_text() == manifest["digest"]:
        return site
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    for name in manifest["wheels"][here]:
        _unpack(bundle / "wheels" / name, site)
    stamp.write_text(manifest["digest"])
    return site


def _unpack(wheel: Path, site: Path) -> None:
    """A wheel's files into ``site``: the root as is, ``*.data/{purelib,platlib}`` merged in
    (scripts and headers are not needed to import)."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = site.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode)


def verify(bundle: Path, python: str) -> list[str]:
    """Install the bundle for ``python`` in a fresh virtual environment and run gputop
    from it; returns what each step printed last."""
    report = []
    with tempfile.TemporaryDirectory(prefix="gpucheck-verify-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
        py = str(venv / "bin" / "python")
        site = Path(tmp) / "site"
        inst = subprocess.run(
            [py, __file__, "install", "--dir", str(bundle), "--site", str(site)],
            capture_output=True,
            text=True,
        )
        if inst.returncode != 0:
            raise BundleError(f"install into {python} failed: {inst.stderr.strip()}")
        env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}", PYTHONNOUSERSITE="1")
        env["LD_LIBRARY_PATH"] = str(bundle / "lib")
        steps = (
            ["-c", "import gputop.cli, gputop.app, textual, pynvml, psutil; print('imports ok')"],
            ["-m", "gputop", "doctor"],
            ["-m", "gputop", "record", "--demo", "cpu-contention", "--duration", "1.5", "-o", "-"],
        )
        for args in steps:
            done = subprocess.run([py, *args], capture_output=True, text=True, env=env, cwd=tmp)
            if done.returncode != 0:
                raise BundleError(f"`{' '.join(args)}` failed: {done.stderr.strip()[-300:]}")
            if "record" in args:
                frames = [json.loads(line) for line in done.stdout.splitlines() if line]
                if not frames:
                    raise BundleError("`gputop record --demo` wrote no frame")
                sched = frames[-1]["sources"]["sched"]
                report.append(
                    f"gputop record --demo: {len(frames)} frames, scheduler source {sched}"
                )
            elif "doctor" in args:
                passed = next((x for x in done.stdout.splitlines() if "checks pass" in x), "")
                report.append(f"gputop doctor: {passed}")
            else:
                report.append(done.stdout.strip())
        report.append(f"site: {sum(1 for _ in site.rglob('*'))} files from the bundle")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("build", "install", "verify"))
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the bundle folder")
    ap.add_argument("--site", type=Path, default=None, help="install: where to unpack")
    ap.add_argument("--python", default=None, help="verify: the interpreter to verify with")
    args = ap.parse_args(argv)
    try:
        if args.command == "build":
            m = build(args.dir)
            size = sum(p.stat().st_size for p in args.dir.rglob("*") if p.is_file())
            count = len(list((args.dir / "wheels").glob("*.whl")))
            pythons = ", ".join(m["wheels"])
            print(f"{count} wheels (Python {pythons}) + {', '.join(LIBS)} in {args.dir}")
            print(f"{size >> 20} MiB")
        elif args.command == "install":
            print(install(args.dir, args.site))
        else:
            if not args.python:
                raise BundleError("verify needs --python (e.g. python3.12)")
            for line in verify(args.dir, args.python):
                print(line)
    except BundleError as exc:
        print(f"gpu_bundle: {exc}", file=sys.stderr)
        return 2
    except (OSError, subprocess.CalledProcessError, zipfile.BadZipFile) as exc:
        print(f"gpu_bundle: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
