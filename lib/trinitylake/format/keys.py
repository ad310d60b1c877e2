"""Key encoding: a 4-character schema-ID part followed by names padded with spaces.

Names are padded and checked by UTF-8 *bytes* (not characters), so every key of one kind has
the same byte width and unsigned byte order groups keys by type, then namespace: listing a
namespace's tables is a prefix scan on ``C===<padded ns>``. Space sorts below every allowed
character, so ``ab␠`` < ``abc``.

The Java reference pads by UTF-16 code units (``String.length()``) instead. For ASCII names the
two agree; for other names a Java-written key is shorter. We always write the spec's padding,
and read both: :meth:`KeyCodec.decode` accepts either, and the ``java_*`` builders give the key
Java would have written, so a lookup can try it when the spec key is absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from trinitylake.errors import InvalidNameError, ValidationError

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

SCHEMA_LAKEHOUSE = 0
SCHEMA_NAMESPACE = 1
SCHEMA_TABLE = 2
SCHEMA_VIEW = 3
SCHEMA_TRANSACTION = 4

KIND_BY_SCHEMA = {SCHEMA_NAMESPACE: "namespace", SCHEMA_TABLE: "table", SCHEMA_VIEW: "view"}

# System keys live in node system rows, never in the key table.
SYS_LAKEHOUSE_DEF = "lakehouse_def"
SYS_PREVIOUS_ROOT = "previous_root"
SYS_ROLLBACK_FROM_ROOT = "rollback_from_root"
SYS_CREATED_AT = "created_at_millis"
SYS_N_KEYS = "n_keys"
# Our extension system rows (the spec allows new system keys): the committing transaction's
# id and its control-table sequence number, so the tree alone can tell which transaction
# produced a version (recovery of audit rows never depends on timestamps).
SYS_TXN_ID = "txn_id"
SYS_TXN_SEQ = "txn_seq"
# A rollback's root also names the root whose content it took (the spec records only the
# root rolled back from), so `tlake versions` can say "rollback to v2 (from v4)".
SYS_ROLLBACK_TO_ROOT = "rollback_to_root"


def schema_prefix(schema_id: int) -> str:
    """Base64 digits, most significant first, right-padded with ``=`` to 4 characters."""
    if schema_id < 0:
        raise ValidationError(f"schema id must be non-negative, got {schema_id}")
    digits = ""
    n = schema_id
    while True:
        digits = _B64[n % 64] + digits
        n //= 64
        if n == 0:
            break
    if len(digits) > 4:
        raise ValidationError(f"schema id {schema_id} does not fit in 4 base64 digits")
    return digits.ljust(4, "=")


NS_PREFIX = schema_prefix(SCHEMA_NAMESPACE)  # "B==="
TABLE_PREFIX = schema_prefix(SCHEMA_TABLE)  # "C==="
VIEW_PREFIX = schema_prefix(SCHEMA_VIEW)  # "D==="


def validate_name(name: str, max_bytes: int, what: str = "name") -> bytes:
    """Check a namespace/table/view name and return its UTF-8 bytes.

    Refused: empty names, bytes 0x00-0x1F, space, DEL, ``/`` (it would escape paths), ``.``
    alone or ``..`` (path traversal in derived file names), and names longer than
    `max_bytes` UTF-8 bytes.
    """
    if not isinstance(name, str) or name == "":
        raise InvalidNameError(f"{what} must be a non-empty string, got {name!r}")
    try:
        raw = name.encode("utf-8", errors="strict")
    except UnicodeEncodeError:  # lone surrogates, e.g. undecodable bytes of a command line
        raise InvalidNameError(f"{what} {name!r} is not valid Unicode text") from None
    for b in raw:
        if b <= 0x20 or b == 0x7F:
            raise InvalidNameError(f"{what} {name!r} contains a control character, space or DEL (byte 0x{b:02x})")
    if "/" in name or "\\" in name:
        raise InvalidNameError(f"{what} {name!r} contains a path separator")
    if name in (".", ".."):
        raise InvalidNameError(f"{what} {name!r} is not allowed")
    if len(raw) > max_bytes:
        raise InvalidNameError(f"{what} {name!r} is {len(raw)} UTF-8 bytes, the maximum is {max_bytes}")
    return raw


def pad(name: str, max_bytes: int, what: str = "name") -> str:
    raw = validate_name(name, max_bytes, what)
    return name + " " * (max_bytes - len(raw))


@dataclass(frozen=True)
class KeyCodec:
    """Encodes and decodes object keys with the name sizes of one lakehouse definition."""

    namespace_max: int = 100
    table_max: int = 100
    view_max: int = 100

    def namespace_key(self, ns: str) -> str:
        return NS_PREFIX + pad(ns, self.namespace_max, "namespace name")

    def table_key(self, ns: str, table: str) -> str:
        return TABLE_PREFIX + pad(ns, self.namespace_max, "namespace name") + pad(table, self.table_max, "table name")

    def view_key(self, ns: str, view: str) -> str:
        return VIEW_PREFIX + pad(ns, self.namespace_max, "namespace name") + pad(view, self.view_max, "view name")

    def tables_prefix(self, ns: str) -> str:
        return TABLE_PREFIX + pad(ns, self.namespace_max, "namespace name")

    def views_prefix(self, ns: str) -> str:
        return VIEW_PREFIX + pad(ns, self.namespace_max, "namespace name")

    # -- the Java reference's padding (UTF-16 code units), for reading what Java wrote
    def java_namespace_key(self, ns: str) -> str | None:
        """The key Java writes for `ns`, or None when it equals the spec key (ASCII names) or
        Java could not have written it."""
        return _java_key(NS_PREFIX, ((ns, self.namespace_max),))

    def java_table_key(self, ns: str, table: str) -> str | None:
        return _java_key(TABLE_PREFIX, ((ns, self.namespace_max), (table, self.table_max)))

    def java_view_key(self, ns: str, view: str) -> str | None:
        return _java_key(VIEW_PREFIX, ((ns, self.namespace_max), (view, self.view_max)))

    def java_tables_prefix(self, ns: str) -> str | None:
        return _java_key(TABLE_PREFIX, ((ns, self.namespace_max),))

    def java_views_prefix(self, ns: str) -> str | None:
        return _java_key(VIEW_PREFIX, ((ns, self.namespace_max),))

    def decode(self, key: str) -> tuple[str, tuple[str, ...]]:
        """Kind (``namespace``/``table``/``view``) and the unpadded names of a key, padded as
        the spec says (UTF-8 bytes) or as the Java reference writes (UTF-16 code units).

        Raises:
            ValidationError: the key is not a well-formed object key of this lakehouse.
        """
        prefix, rest = key[:4], key[4:]
        try:
            raw = rest.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(f"key {key!r} is not valid Unicode text") from None
        if prefix == NS_PREFIX:
            if len(raw) == self.namespace_max:
                return "namespace", (_unpad(raw, key),)
            if _utf16_len(rest) == self.namespace_max:
                return "namespace", (_unpad(raw, key),)
            raise ValidationError(f"namespace key {key!r} is not {self.namespace_max} bytes (nor, as Java pads, "
                                  f"UTF-16 units) after its prefix")
        if prefix in (TABLE_PREFIX, VIEW_PREFIX):
            kind = "table" if prefix == TABLE_PREFIX else "view"
            second = self.table_max if prefix == TABLE_PREFIX else self.view_max
            if len(raw) == self.namespace_max + second:
                return kind, (_unpad(raw[: self.namespace_max], key), _unpad(raw[self.namespace_max :], key))
            cut = _utf16_cut(rest, self.namespace_max)
            if cut is not None and _utf16_len(rest) == self.namespace_max + second:
                return kind, (_unpad(rest[:cut].encode("utf-8"), key), _unpad(rest[cut:].encode("utf-8"), key))
            raise ValidationError(f"key {key!r} has a wrong length for this lakehouse's name sizes "
                                  f"({self.namespace_max} + {second}, in UTF-8 bytes or, as Java pads, UTF-16 units)")
        raise ValidationError(f"key {key!r} has an unknown schema-id part {prefix!r}")

    def describe(self, key: str) -> str:
        """Human name of a key: ``ns`` or ``ns.table``."""
        try:
            _, names = self.decode(key)
        except ValidationError:
            return repr(key)
        return ".".join(names)


def _utf16_len(text: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in text)


def _utf16_cut(text: str, units: int) -> int | None:
    """Character index where the first `units` UTF-16 code units of `text` end (None when
    that falls inside a surrogate pair or past the end)."""
    n = 0
    for i, c in enumerate(text):
        if n == units:
            return i
        n += 2 if ord(c) > 0xFFFF else 1
    return len(text) if n == units else None


def _java_key(prefix: str, parts: tuple[tuple[str, int], ...]) -> str | None:
    """`prefix` + each name padded with spaces to its maximum in UTF-16 code units (Java's
    ``String.length()``); None when every name is ASCII (the spec key is the same) or a name
    is too long even for Java."""
    if all(name.isascii() for name, _ in parts):
        return None
    out = prefix
    for name, max_units in parts:
        validate_name(name, 4 * max_units)  # the naming rules; the length is checked below
        units = _utf16_len(name)
        if units > max_units:
            return None
        out += name + " " * (max_units - units)
    return out


def _unpad(raw: bytes, key: str) -> str:
    try:
        name = raw.decode("utf-8").rstrip(" ")
    except UnicodeDecodeError as e:
        raise ValidationError(f"key {key!r} is not valid UTF-8 at the name boundary") from e
    if not name or " " in name:
        raise ValidationError(f"key {key!r} holds an empty or space-containing name")
    if any(c < " " or c == "\x7f" for c in name):  # the spec's naming rule, whoever wrote the key
        raise ValidationError(f"key {key!r} holds a name with a control character or DEL")
    return name
