"""Secrets in command lines are hidden before a snapshot leaves the machine."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputop.redact import REDACTED, is_secret_name, redact

R = REDACTED

# (command line, the secret that must disappear, the expected result)
CASES = [
    (
        "python train.py --api-key=abc123 --lr 0.1",
        "abc123",
        f"python train.py --api-key={R} --lr 0.1",
    ),
    (
        "python train.py --api_key abc123 --lr 0.1",
        "abc123",
        f"python train.py --api_key {R} --lr 0.1",
    ),
    ("mysql --password hunter2 --user root", "hunter2", f"mysql --password {R} --user root"),
    ("app --passwd=hunter2", "hunter2", f"app --passwd={R}"),
    ("app -token t0k3n", "t0k3n", f"app -token {R}"),
    ("app --apiKey=abc123", "abc123", f"app --apiKey={R}"),
    ("app --hfToken abc123", "abc123", f"app --hfToken {R}"),
    (
        "env AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG python x.py",
        "wJalrXUtnFEMI/K7MDENG",
        f"env AWS_SECRET_ACCESS_KEY={R} python x.py",
    ),
    (
        "env HF_TOKEN=abc WANDB_API_KEY=def python x.py",
        "def",
        f"env HF_TOKEN={R} WANDB_API_KEY={R} python x.py",
    ),
    ("env PGPASSWORD=pw psql", "pw", f"env PGPASSWORD={R} psql"),
    (
        "python train.py db.password=pw trainer.max_epochs=3",
        "pw",
        f"python train.py db.password={R} trainer.max_epochs=3",
    ),
    (
        "git clone https://alice:s3cr3t@github.com/org/repo.git",
        "s3cr3t",
        f"git clone https://alice:{R}@github.com/org/repo.git",
    ),
    (
        "python x.py --db postgres://u:pw%40x@db:5432/app",
        "pw%40x",
        f"python x.py --db postgres://u:{R}@db:5432/app",
    ),
    (
        "pip install git+https://abcdefghijklmnop0123456789@github.com/org/repo",
        "abcdefghijklmnop0123456789",
        f"pip install git+https://{R}@github.com/org/repo",
    ),
    (
        "curl https://bucket.s3.amazonaws.com/obj?X-Amz-Signature=deadbeef&X-Amz-Expires=60",
        "deadbeef",
        f"curl https://bucket.s3.amazonaws.com/obj?X-Amz-Signature={R}&X-Amz-Expires=60",
    ),
    (
        "curl -H Authorization: Bearer abc.def.ghi https://x",
        "abc.def.ghi",
        f"curl -H Authorization: Bearer {R} https://x",
    ),
    ("curl -H X-Api-Key:abc123 https://x", "abc123", f"curl -H X-Api-Key:{R} https://x"),
    (
        'python -c {"password":"pw","user":"bob"}',
        "pw",
        f'python -c {{"password":"{R}","user":"bob"}}',
    ),
    ('run "token": "qwe789" x', "qwe789", f'run "token": {R} x'),
    (
        "x ghp_abcdefghijklmnopqrstuvwxyz0123 hf_abcdefghijklmnopqrstuvwxyz",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        f"x {R} {R}",
    ),
    (
        "x --openai sk-abcdefghijklmnopqrstuvwxyz01",
        "sk-abcdefghijklmnopqrstuvwxyz01",
        f"x --openai {R}",
    ),
    ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", f"aws {R}"),
    (
        "x eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
        f"x {R}",
    ),
]


@pytest.mark.parametrize(("cmdline", "secret", "expected"), CASES)
def test_secret_is_replaced_and_the_rest_kept(cmdline: str, secret: str, expected: str) -> None:
    out = redact(cmdline)
    assert secret not in out
    assert out == expected


@pytest.mark.parametrize(
    "cmdline",
    [
        "python train.py --lr 0.1 --batch-size 64 --epochs=3",
        "python train.py --tokenizer bert-base --pad_token_id 0 --max_new_tokens 5",
        "python train.py --token-file /run/secrets/t --password-file=/run/p --keyboard us",
        "ssh git@github.com",
        "python -m torch.distributed.run --nproc_per_node=8 train.py",
        "https://github.com/org/repo.git",
        "mysql --password --user root",
        "",
    ],
)
def test_harmless_command_lines_are_unchanged(cmdline: str) -> None:
    assert redact(cmdline) == cmdline


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api-key", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("clientSecret", True),
        ("GITHUB_TOKEN", True),
        ("db.password", True),
        ("token-file", False),
        ("pad_token_id", False),
        ("tokenizer", False),
        ("max_new_tokens", False),
        ("monkey", False),
        ("bypass", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


_secret_values = st.text(
    alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd"), max_codepoint=127),
    min_size=6,
    max_size=30,
).map(lambda s: "Z9q" + s)
_forms = st.sampled_from(
    [
        "--api-key={}",
        "--password {}",
        "-token {}",
        "AWS_SECRET_ACCESS_KEY={}",
        "https://user:{}@example.com/x",
        "Authorization: Bearer {}",
        "db.passwd={}",
    ]
)
_words = st.lists(
    st.text(alphabet="abcdefgh-=/._ ", min_size=0, max_size=12), min_size=0, max_size=4
).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(before=_words, form=_forms, secret=_secret_values, after=_words)
def test_generated_secrets_never_survive(before: str, form: str, secret: str, after: str) -> None:
    line = f"{before} {form.format(secret)} {after}"
    assert secret not in redact(line)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once
