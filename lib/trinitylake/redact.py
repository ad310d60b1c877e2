"""One redaction rule for everything the process records or prints.

Options and command lines reach the control table, the plan and result JSON under
``_maintenance/``, logs, ``tlake show``, the HTML report, error messages and the job results
handed to Airflow. Each of those passes its data through this module first, so a credential
given as a storage option (the lakehouse's ``storage_options`` or an export target's
``target_storage_options``, where the keys decide alike), a Spark property, an
environment-derived option (``TLAKE_TARGET_AWS_*`` included: see
`trinitylake.storage.target_options`) or inside a URI never leaves the process in clear text.

Two kinds of rule, both keeping what an operator needs (option names, endpoints, regions,
buckets, paths):

* **by key**: the value of an option whose name says it is a credential (secret, password,
  token, credential, access/secret/account key, session token, SAS, signature, client secret,
  connection string, authorization, and Spark/Hadoop keys such as
  ``spark.hadoop.fs.s3a.secret.key`` or ``fs.azure.account.key.<account>...``) is replaced by
  :data:`REDACTED`. A name ending in a word that names a *setting about* a credential
  (``...credentials.provider``, ``...auth.type``, ``...token.endpoint``, ``..._file``) is kept.
* **by value shape**: ``scheme://user:password@host`` keeps the user, drops the password;
  ``key=value`` / ``"key": "value"`` pairs inside free text follow the key rule; AWS access
  key ids, bearer tokens, JWTs and PEM private keys are replaced wherever they appear.

A value once seen under a credential key (or in a credential-named environment variable) is
also remembered and scrubbed from any later text, e.g. a storage library's error message that
quotes it without its key. Databricks secret references (``{{secrets/scope/key}}``) are
references, not secrets, and are kept.

This module imports nothing from the package: every layer may use it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

REDACTED = "<redacted>"

# Words (after splitting a key on separators and camelCase) that make a key a credential.
_SECRET_WORDS = frozenset({
    "secret", "secrets", "password", "passwd", "pwd", "passphrase", "token", "tokens", "credential",
    "credentials", "sas", "sig", "signature", "apikey", "authorization", "cookie", "privatekey",
    "secretkey", "accesskey", "accountkey", "sastoken", "clientsecret", "connectionstring",
})
# Sub-strings that make a single word a credential (``awssecretaccesskey``, ``dbpassword``).
_SECRET_PARTS = ("secret", "password", "passwd", "token", "credential")
# A key whose LAST word is one of these names a setting about a credential, not the credential.
_SAFE_LAST = frozenset({
    "provider", "providers", "type", "class", "classes", "impl", "binding", "algorithm", "file", "path", "dir",
    "location", "endpoint", "url", "uri", "region", "enabled", "enable", "expiry", "expiration", "ttl",
    "timeout", "interval", "size", "bits", "length", "name", "scope", "renewal", "version", "mode", "format",
    "count", "retries", "header", "headers", "lifetime",
})
_DATABRICKS_REF = re.compile(r"^\{\{\s*secrets/[^}]+\}\}$")
_MIN_REMEMBERED = 8  # shorter values are too likely to occur by chance in paths and names

_known: set[str] = set()
_known_re: re.Pattern[str] | None = None
_lock = threading.Lock()


_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[^a-z0-9]+")


def _words(key: str) -> list[str]:
    return [w for w in _SEPARATORS.split(_CAMEL.sub(r"\1_\2", key).lower()) if w]


def is_secret_key(key: object) -> bool:
    """True if an option named `key` holds a credential.

    Example:
        >>> [is_secret_key(k) for k in ("secret", "spark.hadoop.fs.s3a.secret.key", "fs.s3a.access.key",
        ...  "endpoint_url", "fs.s3a.aws.credentials.provider", "region_name", "sas_token")]
        [True, True, True, False, False, False, True]
    """
    if not isinstance(key, str) or not key or "/" in key:
        # An option name has no slash; a key with one is a path or URI (a plan's or the pending
        # state's file names, by the ten thousand: not worth the name cache's room).
        return False
    return _is_secret_name(key)


@functools.lru_cache(maxsize=8192)  # the same option names come back on every row and log line
def _is_secret_name(key: str) -> bool:
    words = _words(key)
    if not words:
        return False
    if words[-1] in _SAFE_LAST:
        return False
    if words[-1] == "auth" or ("connection" in words and "string" in words):
        return True
    for i, w in enumerate(words):
        if w in _SECRET_WORDS or any(p in w for p in _SECRET_PARTS):
            return True
        if w == "key" or (w.endswith("key") and len(w) > 3):
            # a bare or final `key` (s3fs's access key id, `fs.s3a.access.key`), `account.key.<name>`,
            # `private.key.id`, `*_key_id`; not `spark.ssl.keyStore` (a path).
            prev = words[i - 1] if i else ""
            if i == len(words) - 1 or prev in ("access", "account", "private", "secret", "api", "encryption", "shared"):
                return True
            if words[-1] == "id" or not words[i + 1].isalpha():  # `*_key_id`, `key.<account>...`
                return True
    return False


def remember(value: object) -> None:
    """Scrub `value` from every later text (a credential seen under its key)."""
    global _known_re
    if not isinstance(value, str) or len(value) < _MIN_REMEMBERED or value in _known or _DATABRICKS_REF.match(value):
        return
    with _lock:
        _known.add(value)
        _known_re = re.compile("|".join(re.escape(v) for v in sorted(_known, key=len, reverse=True)))


def remember_environment(env: Mapping[str, str] | None = None) -> None:
    """Remember the values of credential-named environment variables (``AWS_SECRET_ACCESS_KEY``,
    ``AZURE_CLIENT_SECRET``, ...): storage libraries read them and may quote them in errors."""
    for k, v in (os.environ if env is None else env).items():
        if is_secret_key(k) and k not in _SHELL_DIRECTORIES:
            remember(v)


# The shell's working directories: "PWD" reads as a password abbreviation, but its value is a
# path that every relative command line repeats (remembering it made every command run from
# that folder warn of credentials on the command line).
_SHELL_DIRECTORIES = frozenset({"PWD", "OLDPWD"})


# Values that stand for a value in usage text ("expected KEY=VALUE"), not a value.
_PLACEHOLDERS = frozenset({"VALUE", "VAL", "V", "...", "…", "<value>", REDACTED})


def _redact_secret_value(value: object, learn: bool = False) -> Any:
    """REDACTED for a credential's value. `learn`: remember it (options and command lines; not
    free text, where a credential-looking key may be a false positive such as S3's ``Key``)."""
    if value is None or isinstance(value, bool) or value == "" or (isinstance(value, str) and value in _PLACEHOLDERS):
        return value  # whether an option is set is useful and reveals nothing
    if isinstance(value, str):
        if _DATABRICKS_REF.match(value.strip()):
            return value
        if learn:
            remember(value)
    elif isinstance(value, Mapping) and learn:
        for v in value.values():
            remember(v)
    return REDACTED


# ---- free text ------------------------------------------------------------------------------
_URI_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s/:@\"']*):(?P<pw>[^\s/@\"']+)@")
# Keys start at a word boundary (the lookbehind), which keeps a scan of long text linear.
_KV_QUOTED = re.compile(
    r"(?<![\w.\-])(?P<kq>[\"']?)(?P<key>[A-Za-z_][\w.\-]*)(?P=kq)(?P<sep>\s*[=:]\s*b?)(?P<vq>[\"'])(?P<val>(?:\\.|(?!(?P=vq)).)*)(?P=vq)")
_KV_OBJECT = re.compile(r"(?P<kq>[\"'])(?P<key>[A-Za-z_][\w.\-]*)(?P=kq)(?P<sep>\s*:\s*)(?P<val>\{[^{}]*\})")
_KV_PLAIN = re.compile(r"(?<![\w.\-])(?P<key>[A-Za-z_][\w.\-]*)(?P<sep>\s*=\s*|:\s+|:(?=[^/\s]))(?P<val>[^\s,;&\"'})\]]+)")
_SHAPES = [
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]+"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S),
]
#: What any rule above looks for. A colon only when it is not a URI scheme's ``://`` (a URI
#: password needs its ``@``, a query credential its ``=``): the table files' URIs that plans and
#: the pending state list by the ten thousand go through at once (26 -> 2 us each).
_TRIGGER = re.compile(r"[=@]|:(?!//)|AKIA|ASIA|eyJ|-----BEGIN|(?i:bearer|basic)\s")
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}")


def _is_secret_label(key: str, sep: str) -> bool:
    """`key` before `sep` in free text names a credential. After a colon the LAST word must
    say so (``password: x``, ``Authorization: x``), not any word: ``SignatureDoesNotMatch: The
    request...`` is an error code followed by prose."""
    if not is_secret_key(key):
        return False
    if "=" in sep:
        return True
    last = _words(key)[-1]
    return last in _SECRET_WORDS or last == "key" or any(p in last for p in _SECRET_PARTS)


def _kv_quoted(m: re.Match[str]) -> str:
    if not _is_secret_label(m.group("key"), m.group("sep")) or _redact_secret_value(m.group("val"), learn=False) == m.group("val"):
        return m.group(0)
    return f"{m.group('kq')}{m.group('key')}{m.group('kq')}{m.group('sep')}{m.group('vq')}{REDACTED}{m.group('vq')}"


def _kv_object(m: re.Match[str]) -> str:
    if not _is_secret_label(m.group("key"), m.group("sep")):
        return m.group(0)
    return f"{m.group('kq')}{m.group('key')}{m.group('kq')}{m.group('sep')}{REDACTED}"


def _kv_plain(m: re.Match[str]) -> str:
    if not _is_secret_label(m.group("key"), m.group("sep")) or m.group("val") == REDACTED:
        return m.group(0)
    if _redact_secret_value(m.group("val"), learn=False) == m.group("val"):
        return m.group(0)
    return f"{m.group('key')}{m.group('sep')}{REDACTED}"


def _scan(pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str], text: str) -> str:
    """Like ``pattern.sub(replace, text)``, but a match left unchanged gives back everything
    after its key, so ``note: secret=X`` (key ``note``, value ``secret=X``) is looked at again
    from ``secret``."""
    out: list[str] = []
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        new = replace(m)
        if new != m.group(0):
            out.append(text[pos:m.start()] + new)
            pos = m.end()
        else:
            out.append(text[pos:m.end("key")])
            pos = m.end("key")
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: object) -> Any:
    """`text` with credentials replaced (URI passwords, ``key=value`` pairs with a credential
    key, credential-shaped values, remembered secrets). Non-strings are returned as they are.

    Example:
        >>> redact_text("s3://me:hunter2secret@host/b --storage-option secret=abc endpoint_url=http://x")
        's3://me:<redacted>@host/b --storage-option secret=<redacted> endpoint_url=http://x'
    """
    if not isinstance(text, str) or not text:
        return text
    out = text
    if _TRIGGER.search(out):  # most text (names, paths, prose) has nothing any rule looks for
        if "@" in out:
            out = _URI_PASSWORD.sub(lambda m: f"{m.group('head')}:{REDACTED}@", out)
        out = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", out)
        if "=" in out or ":" in out:
            if '"' in out or "'" in out:
                out = _scan(_KV_OBJECT, _kv_object, out)
                out = _scan(_KV_QUOTED, _kv_quoted, out)
            out = _scan(_KV_PLAIN, _kv_plain, out)
        for shape in _SHAPES:
            out = shape.sub(REDACTED, out)
    pattern = _known_re
    if pattern is not None:
        out = pattern.sub(REDACTED, out)
    return out


#: Query parameters named "token" that are no credential: the REST protocols' pagination cursors.
_PAGE_TOKENS = (["page", "token"], ["next", "page", "token"], ["continuation", "token"])


def redact_request_target(target: str) -> str:
    """An HTTP request target (``/path?query``) with the values of credential-named query
    parameters replaced (empty ones too: ``token=`` names where a token goes; a pagination
    cursor such as Iceberg REST's ``pageToken`` is kept) and the rest
    through :func:`redact_text` piece by piece, so that nothing outside a value is taken: an
    access log keeps its whole request line.

    Example:
        >>> redact_request_target("/v1/config?warehouse=x&token=abc123&access_token=")
        '/v1/config?warehouse=x&token=<redacted>&access_token=<redacted>'
    """
    from urllib.parse import unquote_plus  # only servers call this

    path, q, query = target.partition("?")
    out = redact_text(path)
    if not q:
        return out
    pairs = []
    for pair in query.split("&"):
        key, eq, val = pair.partition("=")
        if eq and is_secret_key(unquote_plus(key)) and _words(unquote_plus(key)) not in _PAGE_TOKENS:
            pairs.append(f"{key}={REDACTED}")
        else:
            pairs.append(f"{key}{eq}{redact_text(val)}" if eq else redact_text(pair))
    return f"{out}?{'&'.join(pairs)}"


# ---- structures -----------------------------------------------------------------------------
def redact_argv(argv: Iterable[object], learn: bool = False) -> list[Any]:
    """A command line with credentials replaced: ``--storage-option secret=X``,
    ``--spark-conf spark.hadoop.fs.s3a.secret.key=X``, ``--password X``, ``--token=X``, JSON
    option maps and URIs with passwords. Option names stay. `learn`: also remember the
    credential values (see :func:`remember`), for a command line this process was given.

    Example:
        >>> redact_argv(["--storage-option", "secret=abc", "--password", "pw", "--token=t", "walk"])
        ['--storage-option', 'secret=<redacted>', '--password', '<redacted>', '--token=<redacted>', 'walk']
    """
    out: list[Any] = []
    secret_flag = False
    for tok in argv:
        if not isinstance(tok, str):
            out.append(redact_value(tok, learn=learn))
            secret_flag = False
            continue
        if secret_flag and not tok.startswith("--"):
            out.append(_redact_secret_value(tok, learn))
            secret_flag = False
            continue
        secret_flag = False
        if tok.startswith("-") and not tok.startswith("---"):
            flag, eq, val = tok.partition("=")
            name = flag.lstrip("-")
            if is_secret_key(name):
                if eq:
                    out.append(f"{flag}={_redact_secret_value(val, learn)}")
                else:
                    out.append(tok)
                    secret_flag = True
                continue
            out.append(f"{flag}={_redact_pair_or_text(val, learn)}" if eq else tok)
            continue
        out.append(_redact_pair_or_text(tok, learn))
    return out


def _redact_pair_or_text(tok: str, learn: bool) -> str:
    text = tok.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return redact_text(tok)
        return json.dumps(redact_value(obj, learn=learn)) if isinstance(obj, dict) else redact_text(tok)
    key, eq, val = tok.partition("=")
    if eq and key and re.fullmatch(r"[A-Za-z_][\w.\-]*", key.strip()):
        if is_secret_key(key.strip()):
            return f"{key}={_redact_secret_value(val, learn)}"
        return f"{key}={redact_text(val)}"
    return redact_text(tok)


def redact_value(value: object, key: object = None, *, learn: bool = False) -> Any:
    """A copy of `value` (dicts, lists, strings, numbers) with credentials replaced: values
    under credential keys become :data:`REDACTED`, lists of strings are treated as command
    lines, other strings go through :func:`redact_text`. `learn`: also remember the credential
    values (for the options this process was given; not for documents it merely writes, where
    a key such as ``key`` may name something else).

    Example:
        >>> redact_value({"storage_options": {"secret": "abc", "endpoint_url": "http://h:9000"},
        ...               "spark_conf": {"spark.hadoop.fs.s3a.secret.key": "k", "spark.master": "local"}})
        {'storage_options': {'secret': '<redacted>', 'endpoint_url': 'http://h:9000'}, 'spark_conf': {'spark.hadoop.fs.s3a.secret.key': '<redacted>', 'spark.master': 'local'}}
    """
    if key is not None and is_secret_key(key):
        return _redact_secret_value(value, learn)
    if isinstance(value, Mapping):
        return {k: redact_value(v, k, learn=learn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if all(isinstance(v, str) for v in value):
            red = redact_argv(value, learn)
            return red if isinstance(value, list) else tuple(red)
        items = [redact_value(v, learn=learn) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, str):
        return redact_text(value)
    return value


def secret_options(argv: Sequence[str]) -> list[str]:
    """Names of the credential options given in `argv` (for the command-line warning)."""
    found: list[str] = []
    flag_next = False
    for tok in argv:
        if flag_next and not tok.startswith("--"):
            flag_next = False
            continue
        flag_next = False
        if tok.startswith("-"):
            flag, eq, val = tok.partition("=")
            if is_secret_key(flag.lstrip("-")):
                found.append(flag)
                flag_next = not eq
                continue
            tok = val if eq else ""
        if tok and redact_argv([tok]) != [tok]:
            if tok.lstrip().startswith("{"):
                found.append("a JSON option map")
            elif "=" in tok and is_secret_key(tok.partition("=")[0].strip()):
                found.append(tok.partition("=")[0].strip())
            else:
                found.append("a URI with a password")
    return found


_warned = False


def warn_command_line_secrets(argv: Sequence[str], stream: TextIO | None = None) -> bool:
    """Warn once per process (on stderr) that credentials were given on the command line,
    where `ps`, shell history and a scheduler's logs show them. Returns True if it warned."""
    global _warned

    names = secret_options([str(a) for a in argv])
    if not names or _warned:
        return False
    _warned = True
    print(f"WARNING: credentials passed on the command line ({', '.join(dict.fromkeys(names))}) are visible in "
          "`ps` and shell history; they are redacted from everything tlake writes, but prefer environment "
          "variables, instance roles, Spark's credential providers or Databricks secrets (README: 'Where "
          "credentials come from').", file=stream or sys.stderr)
    return True


# ---- logging ------------------------------------------------------------------------------
class RedactingFilter(logging.Filter):
    """A handler filter that redacts each record's message and traceback before it is
    formatted (a handler filter sees the records of every logger that propagates to it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "tlake_redacted", False):
            return True  # redacted where it was made, by a rule that knows its shape (an access log line)
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not lose the record
            msg = str(record.msg)
        record.msg, record.args = redact_text(msg), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add a :class:`RedactingFilter` to every handler of `logger` (default: the root logger)."""
    for h in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
