"""Loading untrusted bundles: each bad file is one clear UsageError line, never a crash or hang."""

from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputop.errors import UsageError
from gputop.snapshot import MAX_BYTES, MAX_FRAMES, MAX_LIST_ITEMS, Bundle, load_bundle
from tests.bundles import small_frames


def _expect_one_line(path: Path, *fragments: str) -> str:
    with pytest.raises(UsageError) as info:
        load_bundle(str(path))
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith((str(path), "cannot"))
    for frag in fragments:
        assert frag in msg, msg
    return msg


def _write(tmp_path: Path, doc: Any, **dump: Any) -> Path:
    p = tmp_path / "b.json"
    p.write_text(json.dumps(doc, **dump))
    return p


def test_a_good_bundle_loads(tmp_path: Path, good_bundle: dict[str, Any]) -> None:
    b = load_bundle(str(_write(tmp_path, good_bundle)))
    assert isinstance(b, Bundle)
    assert b.frames == small_frames()
    assert b.verdicts[0].state == "busy_but_starving"


def test_every_verdict_keeps_its_cause_and_an_old_bundle_without_causes_loads_with_none(
    tmp_path: Path, good_bundle: dict[str, Any]
) -> None:
    b = load_bundle(str(_write(tmp_path, good_bundle)))
    assert [v.cause for f in b.frames for v in f.verdicts] == ["cpu_limit"] * 3
    assert b.verdicts[0].cause == "cpu_limit"
    old = copy.deepcopy(good_bundle)
    for v in [*old["verdicts"], *(v for f in old["frames"] for v in f["verdicts"])]:
        del v["cause"]
    b = load_bundle(str(_write(tmp_path, old)))
    assert [v.cause for f in b.frames for v in f.verdicts] == [None] * 3
    assert b.verdicts[0].cause is None and b.verdicts[0].state == "busy_but_starving"


def test_a_truncated_bundle(tmp_path: Path, good_bundle: dict[str, Any]) -> None:
    text = json.dumps(good_bundle)
    p = tmp_path / "t.json"
    p.write_text(text[: len(text) // 2])
    _expect_one_line(p, "not valid JSON (truncated or corrupt?)")


def test_binary_garbage(tmp_path: Path) -> None:
    p = tmp_path / "g.json"
    p.write_bytes(bytes(range(256)) * 4)
    _expect_one_line(p, "not UTF-8")


def test_an_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "e.json"
    p.write_text("  \n")
    _expect_one_line(p, "is empty")


def test_a_newer_schema_version(tmp_path: Path, good_bundle: dict[str, Any]) -> None:
    doc = dict(good_bundle, schema="gputop.snapshot/2")
    _expect_one_line(_write(tmp_path, doc), "'gputop.snapshot/2'", "reads 'gputop.snapshot/1'")


@pytest.mark.parametrize("doc", [{"a": 1}, [1, 2], "gputop.snapshot/1", {"schema": 1}, {"t": 1.0}])
def test_json_that_is_not_a_snapshot(tmp_path: Path, doc: Any) -> None:
    _expect_one_line(_write(tmp_path, doc), "not a gputop snapshot")


def test_a_record_file_is_not_a_snapshot(tmp_path: Path) -> None:
    p = tmp_path / "rec.jsonl"
    p.write_text("".join(json.dumps(f.to_dict()) + "\n" for f in small_frames()))
    _expect_one_line(p, "not valid JSON")


def test_a_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    p = tmp_path / "huge.json"
    with open(p, "wb") as f:
        f.truncate(MAX_BYTES + 1)
    _expect_one_line(p, f"limited to {MAX_BYTES // 2**20} MiB")


def test_deep_nesting(tmp_path: Path, good_bundle: dict[str, Any]) -> None:
    p = tmp_path / "deep.json"
    depth = 200_000
    text = json.dumps(dict(good_bundle, meta="X"))
    p.write_text(text.replace('"X"', "[" * depth + "]" * depth))
    _expect_one_line(p, "nested")
    _expect_one_line(
        _write(tmp_path, dict(good_bundle, meta={"a": [[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]})),
        "nested deeper",
    )


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers(tmp_path: Path, good_bundle: dict[str, Any], constant: str) -> None:
    doc = copy.deepcopy(good_bundle)
    doc["frames"][0]["gpus"][0]["util"] = "@@"
    p = tmp_path / "nan.json"
    p.write_text(json.dumps(doc).replace('"@@"', constant))
    _expect_one_line(p)


def test_a_number_with_absurdly_many_digits(tmp_path: Path, good_bundle: dict[str, Any]) -> None:
    doc = copy.deepcopy(good_bundle)
    doc["frames"][0]["seq"] = "@@"
    p = tmp_path / "digits.json"
    p.write_text(json.dumps(doc).replace('"@@"', "9" * 50_000))
    _expect_one_line(p)


@pytest.mark.parametrize(
    ("where", "value", "fragment"),
    [
        (("frames", 0, "gpus", 0, "util"), "97", "GpuSample.util must be a number"),
        (("frames", 0, "gpus", 0, "util"), True, "GpuSample.util must be a number"),
        (("frames", 0, "gpus"), {"0": {}}, "gpus must be a list"),
        (("frames", 0, "host"), [], "HostSample must be an object"),
        (("frames", 0, "processes", 0, "pid"), 1.5, "ProcessSample.pid must be a whole number"),
        (("frames", 0, "processes", 0, "role"), "boss", "ProcessSample.role must be one of"),
        (("frames", 0, "verdicts", 0, "state"), "melting", "Verdict.state must be one of"),
        (("frames", 0, "verdicts", 0, "cause"), "gremlins", "Verdict.cause must be one of"),
        (("frames", 0, "verdicts", 0, "evidence"), "text", "Verdict.evidence must be a list"),
        (("frames", 0, "sources", "notes"), [1], "sources.notes[] must be a str"),
        (("frames", 0, "t"), None, "Frame.t must be a number"),
        (("frames", 1, "t"), 50.0, "oldest first"),
        (("frames",), [], "holds no frames"),
        (("frames",), {}, "'frames' must be a list"),
        (("meta",), [1], "'meta' must be a dict"),
        (("redacted",), "yes", "'redacted' must be a bool"),
        (("processes", 0, "threads", 0, "tid"), "x", "ThreadSample.tid must be a whole number"),
        (("processes", 0, "cmdline"), "x" * 70_000, "a string of 70000 characters"),
    ],
)
def test_wrong_types_and_values(
    tmp_path: Path, good_bundle: dict[str, Any], where: tuple[Any, ...], value: Any, fragment: str
) -> None:
    doc = copy.deepcopy(good_bundle)
    node = doc
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    _expect_one_line(_write(tmp_path, doc), fragment)


def test_missing_fields(tmp_path: Path, good_bundle: dict[str, Any]) -> None:
    doc = copy.deepcopy(good_bundle)
    del doc["frames"][0]["host"]
    _expect_one_line(_write(tmp_path, doc), "frame 0", "missing field 'host'")
    doc = copy.deepcopy(good_bundle)
    del doc["processes"][0]["comm"]
    _expect_one_line(_write(tmp_path, doc), "process table", "comm")


def test_absurd_numbers_of_items(tmp_path: Path, good_bundle: dict[str, Any]) -> None:
    doc = dict(good_bundle, frames=[good_bundle["frames"][0]] * (MAX_FRAMES + 1))
    _expect_one_line(_write(tmp_path, doc, separators=(",", ":")), f"limit {MAX_FRAMES}")
    doc = dict(good_bundle, meta={"x": [0] * (MAX_LIST_ITEMS + 1)})
    _expect_one_line(_write(tmp_path, doc, separators=(",", ":")), f"limit {MAX_LIST_ITEMS}")


def _finishes(fn: Callable[[], None], seconds: float) -> bool:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive()


def test_a_fifo_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert _finishes(lambda: _expect_one_line(fifo, "not a regular file"), 10)


def test_a_file_name_with_a_newline_still_gives_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bad\nname.json"
    p.write_text("{")
    with pytest.raises(UsageError) as info:
        load_bundle(str(p))
    assert "\n" not in str(info.value)
    assert "not valid JSON" in str(info.value)


def test_a_directory_and_a_missing_file(tmp_path: Path) -> None:
    _expect_one_line(tmp_path, "not a regular file")
    with pytest.raises(UsageError, match=r"cannot open .*No such file"):
        load_bundle(str(tmp_path / "missing.json"))


# ---- fuzzing ------------------------------------------------------------------


def _load_or_usage_error(path: Path) -> None:
    try:
        load_bundle(str(path))
    except UsageError as exc:
        assert "\n" not in str(exc)
        assert len(str(exc)) < 600


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("fuzz")


_FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_FUZZ
@given(data=st.data())
def test_fuzz_byte_mutations(
    fuzz_dir: Path, good_bundle: dict[str, Any], data: st.DataObject
) -> None:
    raw = bytearray(json.dumps(good_bundle).encode())
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if op == "flip" and raw:
            raw[pos] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del raw[pos:]
        elif op == "insert":
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del raw[pos : pos + data.draw(st.integers(1, 16))]
    p = fuzz_dir / "bytes.json"
    p.write_bytes(bytes(raw))
    _load_or_usage_error(p)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@_FUZZ
@given(data=st.data())
def test_fuzz_structure_replacements(
    fuzz_dir: Path, good_bundle: dict[str, Any], data: st.DataObject
) -> None:
    doc = copy.deepcopy(good_bundle)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        where = data.draw(st.sampled_from(paths))
        node = doc
        for key in where[:-1]:
            node = node[key]
        if data.draw(st.booleans()) and isinstance(node, dict):
            del node[where[-1]]
        else:
            node[where[-1]] = data.draw(_json_values)
    p = fuzz_dir / "struct.json"
    p.write_text(json.dumps(doc))
    _load_or_usage_error(p)


@_FUZZ
@given(
    doc=st.dictionaries(
        st.sampled_from(["frames", "meta", "processes", "created_t", "x"]), _json_values
    )
)
def test_fuzz_random_documents_with_the_schema(fuzz_dir: Path, doc: dict[str, Any]) -> None:
    p = fuzz_dir / "rand.json"
    p.write_text(json.dumps({"schema": "gputop.snapshot/1", **doc}))
    _load_or_usage_error(p)
