"""Remove secrets from command lines before they leave the machine in a snapshot.

A command line here is what ``/proc/PID/cmdline`` gives with its NULs turned into
spaces, so quoting is gone and arguments are whitespace-separated words. What is
treated as a secret:

* the value of an option or ``NAME=value`` assignment whose name says it holds a
  secret (``--api-key=…``, ``--password x``, ``AWS_SECRET_ACCESS_KEY=…``,
  ``db.password=…``, ``"token": "…"``), unless the name says it is only about the
  secret (``--token-file``, ``--pad-token-id``, ``--tokenizer``);
* the password in a URL (``https://user:pass@host``), a bare token used as a URL's
  user name, and secret-named query parameters (``?sig=…&token=…``);
* the word after ``Bearer`` / ``Basic`` (HTTP authorization headers);
* strings shaped like well-known credentials (GitHub, Hugging Face, OpenAI, Slack,
  GitLab and AWS key formats, JSON Web Tokens) wherever they appear.

Redaction errs on the side of hiding: a harmless value under a secret-sounding name
is hidden too. ``redact`` is idempotent.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

# Name parts (split at -, _, . and other punctuation) that mark a secret.
_SECRET_PARTS = frozenset(
    {
        "pass",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "secrets",
        "token",
        "key",
        "apikey",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "signature",
        "sig",
        "sas",
        "bearer",
    }
)
# Names that end like this (after removing separators) are secrets too: camelCase
# and run-together names such as apiKey, hfToken, PGPASSWORD.
_SECRET_SUFFIXES = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "credentials",
    "credential",
    "passphrase",
)
# A last name part that makes the value a reference to a secret, not the secret.
_HARMLESS_LAST_PARTS = frozenset(
    {
        "file",
        "path",
        "dir",
        "name",
        "type",
        "size",
        "len",
        "length",
        "id",
        "ids",
        "count",
        "num",
        "limit",
        "env",
        "cmd",
        "command",
        "method",
        "mode",
    }
)

_NAME_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# NAME=value, --name=value, -name=value, a.b.c=value (Hydra overrides).
_ASSIGN = re.compile(r"^(?P<lead>-{0,2})(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>.*)$", re.S)
# --name or -name standing alone, its value in the next word.
_FLAG = re.compile(r"^-{1,2}(?P<name>[A-Za-z][A-Za-z0-9_.\-]*)$")
# "name": or name: standing alone (JSON or YAML fragments, HTTP headers), value next.
_COLON_NAME = re.compile(r"^[\"']?(?P<name>[A-Za-z][A-Za-z0-9_.\-]*)[\"']?:$")
# Header:value in one word.
_COLON_PAIR = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_\-]*):(?P<value>[^/].*)$", re.S)
# "name": "value" inside one word (JSON without spaces).
_JSON_PAIR = re.compile(
    r"(?P<q>[\"'])(?P<name>[A-Za-z][A-Za-z0-9_.\-]*)(?P=q)(?P<sep>\s*:\s*)"
    r"(?P<vq>[\"'])(?P<value>[^\"']*)(?P=vq)"
)
# scheme://user:password@ and scheme://token@
_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/\s:@]*)(?::(?P<pw>[^/\s@]*))?@"
)
_TOKENISH_USER = re.compile(r"^[A-Za-z0-9_\-]{16,}$")
# ?name=value&name=value
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&;#\s?]+)=(?P<value>[^&;#\s]*)")
_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})
_KNOWN_TOKENS = re.compile(
    r"(?:"
    r"\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bglpat-[A-Za-z0-9_\-]{20,}"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\bsk-[A-Za-z0-9_\-]{20,}"
    r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r")"
)
_WORDS = re.compile(r"(\s+)")


def is_secret_name(name: str) -> bool:
    """Whether an option, variable or key called ``name`` holds a secret value."""
    spaced = _CAMEL.sub("_", name).lower()
    parts = [p for p in _NAME_SPLIT.split(spaced) if p]
    if not parts or parts[-1] in _HARMLESS_LAST_PARTS:
        return False
    if any(p in _SECRET_PARTS for p in parts):
        return True
    return "".join(parts).endswith(_SECRET_SUFFIXES)


def _redact_urls(word: str) -> str:
    def userinfo(m: re.Match[str]) -> str:
        user, pw = m.group("user"), m.group("pw")
        if pw is not None:
            return f"{m.group('scheme')}{user}:{REDACTED if pw else ''}@"
        if _TOKENISH_USER.match(user):
            return f"{m.group('scheme')}{REDACTED}@"
        return m.group(0)

    def param(m: re.Match[str]) -> str:
        if m.group("value") and is_secret_name(m.group("name")):
            return f"{m.group('sep')}{m.group('name')}={REDACTED}"
        return m.group(0)

    word = _URL_USERINFO.sub(userinfo, word)
    if "://" in word or word.startswith("?"):
        word = _QUERY_PARAM.sub(param, word)
    return word


def _redact_word(word: str) -> tuple[str, bool]:
    """The word with its own secrets hidden, and whether the next word is a secret value."""
    word = _KNOWN_TOKENS.sub(REDACTED, word)
    word = _redact_urls(word)

    def json_pair(m: re.Match[str]) -> str:
        if m.group("value") and is_secret_name(m.group("name")):
            q, vq = m.group("q"), m.group("vq")
            return f"{q}{m.group('name')}{q}{m.group('sep')}{vq}{REDACTED}{vq}"
        return m.group(0)

    word = _JSON_PAIR.sub(json_pair, word)
    m = _ASSIGN.match(word)
    if m is not None:
        if m.group("value") and is_secret_name(m.group("name")):
            return f"{m.group('lead')}{m.group('name')}={REDACTED}", False
        return word, False
    m = _FLAG.match(word)
    if m is not None:
        return word, is_secret_name(m.group("name"))
    m = _COLON_NAME.match(word)
    if m is not None:
        return word, is_secret_name(m.group("name"))
    m = _COLON_PAIR.match(word)
    if m is not None and is_secret_name(m.group("name")):
        return f"{m.group('name')}:{REDACTED}", False
    return word, word.lower() in _AUTH_SCHEMES


def redact(text: str) -> str:
    """``text`` (a command line, an evidence line) with every secret it shows replaced."""
    if not text:
        return text
    pieces = _WORDS.split(text)
    secret_next = False
    for i in range(0, len(pieces), 2):
        word = pieces[i]
        if not word:
            continue
        if secret_next and not word.startswith("-"):
            # A value, unless it is itself an authorization scheme ("Authorization: Bearer x").
            if word.lower() in _AUTH_SCHEMES:
                continue
            pieces[i] = REDACTED
            secret_next = False
            continue
        pieces[i], secret_next = _redact_word(word)
    return "".join(pieces)
