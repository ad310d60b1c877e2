"""Fuzzing the readers of untrusted bytes and names.

Every input either gives a correct result or a typed error (a TrinityLakeError subclass);
never a crash (IndexError, KeyError, UnicodeError, a segfault, ...) and never a wrong answer
where the right one is known (round trips of valid inputs). Input counts go to the ledger.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.oracle.reader import LocalFiles
from trinitylake.errors import (
    CorruptDefinitionError,
    CorruptNodeError,
    InvalidNameError,
    InvalidURIError,
    TrinityLakeError,
    ValidationError,
)
from trinitylake.format import definitions as D
from trinitylake.format.keys import NS_PREFIX, TABLE_PREFIX, VIEW_PREFIX, KeyCodec, validate_name
from trinitylake.format.node import SCHEMA, Message, Node, deserialize, serialize
from trinitylake.format.paths import MAX_VERSION, parse_hint, root_name, root_version
from trinitylake.storage.uri import join_uri, parse_uri
from trinitylake.treewalk.reach import Locator

# Text with everything in it: control characters, NUL, lone surrogates, astral planes.
ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=40)
NAME_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x2FF, exclude_characters="/\\\x7f")


def fuzz(ledger, scale, name: str, strategy: st.SearchStrategy, check: Callable[[Any], str]) -> Counter:
    """Run `check` over `scale.fuzz_examples` inputs; `check` returns an outcome label and
    raises AssertionError for a wrong answer. Records the input count in the ledger."""
    seen: Counter = Counter()

    @settings(max_examples=scale.fuzz_examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def prop(x: Any) -> None:
        seen["inputs"] += 1
        seen[check(x)] += 1

    t0 = time.perf_counter()
    prop()
    outcomes = {k: v for k, v in seen.items() if k != "inputs"}
    ledger.add("fuzz", name, inputs=seen["inputs"], seconds=time.perf_counter() - t0, outcomes=outcomes)
    return seen


def typed(fn: Callable[[], Any], *allowed: type[BaseException]) -> tuple[str, Any]:
    """("ok", result) or (error class name, None) for the allowed typed errors; anything else
    propagates and fails the test."""
    try:
        return "ok", fn()
    except allowed as e:
        assert isinstance(e, TrinityLakeError), f"{type(e).__name__} is not a TrinityLakeError"
        return type(e).__name__, None


# ---- node files ------------------------------------------------------------------------------
ORDER = 6
KEY = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12).map(lambda s: "B===" + s)
VALUE = st.text(min_size=1, max_size=20)


@st.composite
def valid_nodes(draw) -> Node:
    keys = sorted(set(draw(st.lists(KEY, max_size=ORDER - 1))))
    values = [draw(VALUE) for _ in keys]
    internal = draw(st.booleans()) and bool(keys)
    children = [draw(VALUE) for _ in range(len(keys) + 1)] if internal else []
    system = draw(st.dictionaries(st.sampled_from(["created_at_millis", "lakehouse_def", "previous_root", "txn_id",
                                                   "x-ext"]), VALUE, max_size=4))
    buffer = [Message(draw(KEY), draw(st.none() | VALUE), draw(VALUE)) for _ in range(draw(st.integers(0, 6)))]
    return Node(system=system, keys=keys, values=values, children=children, buffer=buffer)


def check_node_invariants(node: Node) -> None:
    """What a caller may rely on for any node deserialize returns."""
    assert all(isinstance(k, str) for k in node.keys) and all(isinstance(v, str) for v in node.values)
    assert len(node.keys) == len(node.values)
    assert all(a < b for a, b in zip(node.keys, node.keys[1:], strict=False)), "key table not sorted"
    assert not node.children or len(node.children) == len(node.keys) + 1
    assert all(isinstance(c, str) for c in node.children)
    for m in node.buffer:
        assert isinstance(m.key, str) and isinstance(m.txn, str) and (m.value is None or isinstance(m.value, str))
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in node.system.items())


def same_node(a: Node, b: Node) -> bool:
    sys_b = {k: v for k, v in b.system.items() if k != "n_keys"}
    return (a.system == sys_b and a.keys == b.keys and a.values == b.values and a.children == b.children
            and [(m.key, m.value, m.txn) for m in a.buffer] == [(m.key, m.value, m.txn) for m in b.buffer])


def read_node(data: bytes, order: int | None) -> str:
    outcome, node = typed(lambda: deserialize(data, order, "fuzz"), CorruptNodeError)
    if node is not None:
        check_node_invariants(node)
    return outcome


def test_node_reader_random_bytes(ledger, scale) -> None:
    fuzz(ledger, scale, "node reader: random bytes", st.tuples(st.binary(max_size=2048), st.sampled_from([None, ORDER])),
         lambda x: read_node(*x))


def test_node_reader_roundtrip(ledger, scale) -> None:
    def check(node: Node) -> str:
        back = deserialize(serialize(node, ORDER), ORDER, "fuzz")
        assert same_node(node, back), "round trip changed the node"
        back2 = deserialize(serialize(node, ORDER), None, "fuzz")  # order taken from the file
        assert same_node(node, back2), "round trip without the order changed the node"
        return "ok"

    fuzz(ledger, scale, "node reader: valid nodes round trip", valid_nodes(), check)


MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
    st.tuples(st.just("splice"), st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20))),
    st.tuples(st.just("insert"), st.tuples(st.integers(0, 1 << 20), st.binary(min_size=1, max_size=16))),
)


def mutate(data: bytes, mutation: tuple) -> bytes:
    b = bytearray(data)
    kind, arg = mutation
    if kind == "flip":
        for pos, val in arg:
            b[pos % len(b)] = val
    elif kind == "truncate":
        b = b[: arg % len(b)]
    elif kind == "splice":
        p, q = arg[0] % len(b), arg[1] % len(b)
        b = b[:p] + b[q:]
    else:
        p = arg[0] % (len(b) + 1)
        b = b[:p] + bytearray(arg[1]) + b[p:]
    return bytes(b)


def test_node_reader_mutated_files(ledger, scale) -> None:
    # A regression check for the segfault this fuzzer found: corrupt offsets in a valid-looking
    # IPC file were read out of bounds; the reader now validates the file fully.
    fuzz(ledger, scale, "node reader: mutated valid files",
         st.tuples(valid_nodes(), MUTATION, st.sampled_from([None, ORDER])),
         lambda x: read_node(mutate(serialize(x[0], ORDER), x[1]), x[2]))


ARROW_TYPES = [pa.utf8(), pa.large_utf8(), pa.binary(), pa.int64(), pa.bool_(), pa.list_(pa.utf8()),
               pa.dictionary(pa.int32(), pa.utf8()), pa.null(), pa.float64()]


@st.composite
def wrong_schema_files(draw) -> bytes:
    names = draw(st.lists(st.sampled_from(["key", "value", "pnode", "txn", "extra", "Key", ""]), min_size=1, max_size=5))
    n = draw(st.integers(0, 8))
    fields, arrays = [], []
    for name in names:
        t = draw(st.sampled_from(ARROW_TYPES))
        values = draw(st.lists(st.none() | st.text(max_size=6), min_size=n, max_size=n))
        try:
            if pa.types.is_dictionary(t):
                arr = pa.array(values, pa.utf8()).dictionary_encode()
                t = arr.type
            elif pa.types.is_list(t):
                arr = pa.array([None if v is None else [v] for v in values], t)
            elif pa.types.is_null(t):
                arr = pa.nulls(n)
            elif pa.types.is_integer(t) or pa.types.is_floating(t):
                arr = pa.array([None if v is None else len(v) for v in values], t)
            elif pa.types.is_boolean(t):
                arr = pa.array([None if v is None else bool(v) for v in values], t)
            elif pa.types.is_binary(t):
                arr = pa.array([None if v is None else v.encode() for v in values], t)
            else:
                arr = pa.array(values, t)
        except (pa.ArrowException, ValueError):
            arr = pa.nulls(n)
            t = pa.null()
        fields.append(pa.field(name, t))
        arrays.append(arr)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def test_node_reader_wrong_schemas(ledger, scale) -> None:
    fuzz(ledger, scale, "node reader: wrong schemas", st.tuples(wrong_schema_files(), st.sampled_from([None, ORDER])),
         lambda x: read_node(*x))


@st.composite
def random_layouts(draw) -> bytes:
    """The right schema, random cells: NULL separators, keys and txns in random places."""
    rows = draw(st.lists(st.tuples(st.none() | KEY, st.none() | VALUE, st.none() | VALUE, st.none() | VALUE),
                         max_size=14))
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    table = pa.Table.from_arrays([pa.array(list(c), pa.utf8()) for c in cols], schema=SCHEMA)
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, SCHEMA) as w:
        w.write_table(table)
    return sink.getvalue()


def test_node_reader_random_layouts(ledger, scale) -> None:
    fuzz(ledger, scale, "node reader: random cell layouts", st.tuples(random_layouts(), st.sampled_from([None, 3, ORDER])),
         lambda x: read_node(*x))


# ---- keys and names --------------------------------------------------------------------------
CODEC = KeyCodec(namespace_max=8, table_max=6, view_max=7)
NAME = st.text(NAME_CHARS, min_size=1, max_size=6).filter(lambda s: s not in (".", "..") and len(s.encode()) <= 6)


def test_key_decode_random_text(ledger, scale) -> None:
    prefixed = st.tuples(st.sampled_from([NS_PREFIX, TABLE_PREFIX, VIEW_PREFIX, "A===", "B==", ""]), ANY_TEXT)

    def check(x: tuple[str, str]) -> str:
        key = x[0] + x[1]
        outcome, res = typed(lambda: CODEC.decode(key), ValidationError)
        if res is not None:  # a decoded key re-encodes to itself: never a wrong answer
            kind, names = res
            assert all(n and all(c > " " and c != "\x7f" for c in n) for n in names), f"{key!r} gave bad {names}"
            encode = {"namespace": CODEC.namespace_key, "table": CODEC.table_key, "view": CODEC.view_key}[kind]
            # Keys padded as the Java reference does (UTF-16 units) decode too: they re-encode
            # with the Java padding.
            java = {"namespace": CODEC.java_namespace_key, "table": CODEC.java_table_key,
                    "view": CODEC.java_view_key}[kind]
            again = java_again = None
            try:
                again = encode(*names)
            except InvalidNameError:
                pass
            try:
                java_again = java(*names)
            except InvalidNameError:
                pass
            if again is None and java_again is None:
                # Names another writer may store (the spec allows '/' and '.'), which this library
                # refuses to create (they would escape derived file names).
                assert any("/" in n or "\\" in n or n in (".", "..") for n in names), names
                return "foreign-name"
            assert key in (again, java_again), f"{key!r} decoded to {kind} {names}, which encodes to {again!r} / {java_again!r}"
        CODEC.describe(key)  # never raises
        return outcome

    fuzz(ledger, scale, "key decoding: random text", prefixed, check)


def test_key_roundtrip(ledger, scale) -> None:
    def check(x: tuple[str, str, str]) -> str:
        kind, ns, obj = x
        if kind == "namespace":
            assert CODEC.decode(CODEC.namespace_key(ns)) == ("namespace", (ns,))
        elif kind == "table":
            assert CODEC.decode(CODEC.table_key(ns, obj)) == ("table", (ns, obj))
        else:
            assert CODEC.decode(CODEC.view_key(ns, obj)) == ("view", (ns, obj))
        return "ok"

    fuzz(ledger, scale, "key encoding: round trip", st.tuples(st.sampled_from(["namespace", "table", "view"]), NAME, NAME),
         check)


def test_validate_name_random_text(ledger, scale) -> None:
    def check(name: str) -> str:
        outcome, raw = typed(lambda: validate_name(name, 16), InvalidNameError)
        if raw is not None:  # accepted names follow every rule
            assert raw == name.encode("utf-8") and 0 < len(raw) <= 16
            assert all(b > 0x20 and b != 0x7F for b in raw)
            assert "/" not in name and "\\" not in name and name not in (".", "..")
        return outcome

    fuzz(ledger, scale, "names: random text", ANY_TEXT, check)


# ---- hint file, root names, URIs -------------------------------------------------------------
def test_parse_hint_random_bytes(ledger, scale) -> None:
    def check(data: bytes) -> str:
        v = parse_hint(data)  # never raises: the hint is best effort
        if v is None:
            return "garbage"
        text = data.decode("ascii").strip()  # a version is only read from ASCII digits
        assert 0 <= v <= MAX_VERSION and text.isdigit() and int(text) == v
        return "version"

    digits = st.integers(0, 1 << 70).map(lambda n: str(n).encode())
    fuzz(ledger, scale, "hint file: random bytes", st.one_of(st.binary(max_size=30), digits,
                                                              st.tuples(digits, st.binary(max_size=3)).map(b"".join)),
         check)


def test_root_names_and_uris(ledger, scale) -> None:
    loc = Locator.for_root("s3://bucket/lake")

    def check(x: tuple[str, int]) -> str:
        text, v = x
        outcome, got = typed(lambda: root_version(text), ValidationError)
        if got is not None:
            assert root_name(got) == text.rsplit("/", 1)[-1]
        assert root_version(root_name(v % (MAX_VERSION + 1))) == v % (MAX_VERSION + 1)
        o2, p = typed(lambda: parse_uri(text), InvalidURIError)
        if p is not None:
            assert ".." not in p.uri.split("/") and parse_uri(p.uri) == p  # normalized, idempotent
        o3, j = typed(lambda: join_uri("s3://bucket/lake", text), InvalidURIError)
        if j is not None:
            assert j == "s3://bucket/lake" or j.startswith("s3://bucket/lake/")  # never escapes the base
        o4, k = typed(lambda: loc.key(text, loc.root), InvalidURIError, ValidationError)
        if k is not None and "://" not in k:
            assert ".." not in k.split("/")
        return f"{outcome}/{o2}/{o3}/{o4}"

    fuzz(ledger, scale, "root names, URIs and pointers: random text",
         st.tuples(st.one_of(ANY_TEXT, st.from_regex(r"\A_[01]{64}\.arrow\Z"),
                             st.lists(st.sampled_from(["..", ".", "", "a", "s3:", "file:", "_0"]), max_size=6)
                             .map("/".join)),
                   st.integers(0, 1 << 66)),
         check)


# ---- protobuf definitions --------------------------------------------------------------------
DEF_CLASSES = [D.LakehouseDef, D.NamespaceDef, D.TableDef, D.ViewDef, D.TransactionDef]


def _valid_def(cls: type, seed: int) -> bytes:
    if cls is D.LakehouseDef:
        d = D.new_lakehouse_def()
        d.properties["k"] = str(seed)
        d.exported_snapshots["snap"] = "s3://b/x/_0.arrow"
    elif cls is D.TableDef:
        d = D.TableDef(id=str(seed), format_properties={"metadata_location": "s3://b/m.json"}, properties={"a": "b"})
    else:
        d = cls(id=str(seed))
    return D.dumps(d)


def test_definitions_random_and_mutated_bytes(ledger, scale) -> None:
    def check(x: tuple[int, bool, bytes, tuple]) -> str:
        i, use_valid, data, mutation = x
        cls = DEF_CLASSES[i]
        if use_valid:
            data = mutate(_valid_def(cls, len(data)), mutation)
        outcome, msg = typed(lambda: D.loads(cls, data, "fuzz.binpb"), CorruptDefinitionError)
        if msg is not None:
            assert isinstance(msg, cls)
            D.dumps(msg)  # whatever parsed can be written back
        return outcome

    fuzz(ledger, scale, "protobuf definitions: random and mutated bytes",
         st.tuples(st.integers(0, len(DEF_CLASSES) - 1), st.booleans(), st.binary(max_size=256), MUTATION), check)


# ---- a whole lakehouse whose root file is corrupt -------------------------------------------
@pytest.fixture(scope="module")
def small_lakehouse_bytes() -> dict[str, bytes]:
    """The files of a small lakehouse (in memory), to corrupt one at a time."""
    import uuid

    from trinitylake.lakehouse import Lakehouse

    lh = Lakehouse.create(f"memory://fuzz-{uuid.uuid4().hex}", order=4, node_max_bytes=4096, audit=False)
    lh.create_namespace("ns")
    for i in range(12):
        lh.create_table("ns", f"t{i}")
    for i in (3, 11):  # delete messages too: a read must honour them (a table dropped is gone)
        lh.drop_table("ns", f"t{i}")
    return {f.path: lh.storage.read(f.path) for f in lh.storage.list("")}


class _MemFiles(LocalFiles):
    """The oracle's file access over an in-memory copy of the files (relative path -> bytes)."""

    def __init__(self, root: str, files: dict[str, bytes]):
        super().__init__()
        self.root, self.data = root, files

    def path(self, uri: str) -> str:
        return uri

    def _rel(self, uri: str) -> str:
        return uri[len(self.root) + 1:] if uri.startswith(self.root + "/") else uri

    def read(self, uri: str) -> bytes:
        try:
            return self.data[self._rel(uri)]
        except KeyError:
            raise FileNotFoundError(uri) from None

    def exists(self, uri: str) -> bool:
        return self._rel(uri) in self.data

    def list(self, root: str) -> set[str]:
        return set(self.data)


def oracle_contents(files: dict[str, bytes]) -> dict[int, dict[str, frozenset[str]]] | None:
    """What the independent oracle reads from the same bytes: per version, every namespace
    with its tables (None when the oracle cannot read them: it then does not judge)."""
    from tests.oracle import expect as E
    from tests.oracle.reader import Oracle, OracleError

    o = Oracle("file:///fuzz-lakehouse")
    o.files = _MemFiles(o.root, files)  # type: ignore[assignment]
    out: dict[int, dict[str, frozenset[str]]] = {}
    try:
        for v in o.listed_versions():
            uri = f"{o.root}/{root_name(v)}"
            ns_max, t_max = E._widths(o, uri)
            names: dict[str, set[str]] = {}
            spaces: set[str] = set()
            for k, d_uri in E.merged_keys(o, uri).items():
                d = E.decode(k, ns_max, t_max)
                if d is None:
                    continue
                o._read(d_uri, "definition")  # a reader loads it: it must exist
                names.setdefault(d[0], set())
                if d[1] is None:
                    spaces.add(d[0])
                else:
                    names[d[0]].add(d[1])
            # A reader lists the namespaces, then each one's tables: a table row whose namespace
            # has no row of its own (a flipped byte in a table key's namespace part) is never
            # listed by anyone.
            out[v] = {ns: frozenset(t) for ns, t in names.items() if ns in spaces}
    except (OracleError, UnicodeDecodeError, ValueError, KeyError, IndexError):
        return None
    return out


def test_lakehouse_with_a_corrupt_file(ledger, scale, small_lakehouse_bytes) -> None:
    """Every version is read in full; a typed error, or exactly what the oracle reads from the
    same (corrupted) bytes: an "ok" is checked against it, never taken on trust."""
    import uuid

    from trinitylake.lakehouse import Lakehouse
    from trinitylake.storage import Storage

    paths = sorted(small_lakehouse_bytes)
    assert oracle_contents(small_lakehouse_bytes) is not None, "the oracle reads the intact lakehouse"

    def check(x: tuple[int, tuple]) -> str:
        victim = paths[x[0] % len(paths)]
        uri = f"memory://fuzz-{uuid.uuid4().hex}"
        st_ = Storage(uri)
        files = {p: mutate(data, x[1]) if p == victim else data for p, data in small_lakehouse_bytes.items()}
        for p, data in files.items():
            st_.write(p, data)

        def read_everything() -> dict[int, dict[str, frozenset[str]]]:
            lh = Lakehouse.open(uri, audit=False)
            out = {}
            for v in range(lh.latest_version() + 1):
                view = lh.view(version=v)
                out[v] = {}
                for ns in view.list_namespaces():
                    view.load_namespace(ns)
                    tables = view.list_tables(ns)
                    for t in tables:
                        view.load_table(ns, t)
                    out[v][ns] = frozenset(tables)
            return out

        try:
            outcome, read = typed(read_everything, TrinityLakeError)
        finally:
            st_.delete(list(small_lakehouse_bytes))
        if outcome == "ok":
            expected = oracle_contents(files)
            if expected is None:
                outcome = "ok (oracle cannot read)"
            else:
                assert read == expected, f"{victim} corrupted: the library read {read}, the oracle {expected}"
                outcome = "ok (= oracle)"
        return f"{victim.rsplit('-', 1)[0][:14]}:{outcome}"

    seen = fuzz(ledger, scale, "lakehouse with one corrupt file", st.tuples(st.integers(0, 1 << 16), MUTATION), check)
    assert sum(n for k, n in seen.items() if k.endswith("ok (= oracle)")) > 0, "no read was checked"
