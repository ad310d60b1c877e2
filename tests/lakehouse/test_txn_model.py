"""Stateful test of interleaved transactions against a serial model.

Several transactions begin at different versions, run operations (each predicted against
the transaction's own snapshot + its writes) and commit in random order. At each commit:

* the outcome (new version or TransactionConflictError) must match the conflict rules of
  FORMAT.md §6, computed by the model from the change sets of the versions committed since
  the transaction began: SNAPSHOT = write-write + namespace create/drop vs. objects inside it;
  SERIALIZABLE = that plus the read set (point reads and prefix scans);
* a committed transaction must be serially correct: replaying its operations, in order, on
  the committed state at its commit gives exactly its effects (for SERIALIZABLE every
  operation must also give the same answer, failures and reads included);
* the lakehouse then equals the model, and no version is lost or duplicated.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from trinitylake.errors import AlreadyExistsError, ObjectNotFoundError, TransactionConflictError, ValidationError
from trinitylake.lakehouse import Lakehouse

NS = ["a", "b", "c"]
TABLES = ["t1", "t2", "t3"]
ISOLATIONS = ["snapshot", "serializable"]

Key = tuple  # ("ns", ns) or ("t", ns, table)
State = dict  # Key -> property value "p"


def ns_key(ns: str) -> Key:
    return ("ns", ns)


def t_key(ns: str, t: str) -> Key:
    return ("t", ns, t)


def tables_of(state: State, ns: str) -> list[Key]:
    return sorted(k for k in state if k[0] == "t" and k[1] == ns)


@dataclass
class ModelTxn:
    """What the model knows about one open transaction."""

    real: object
    isolation: str
    base_version: int
    base: State
    view: State
    writes: dict = field(default_factory=dict)
    reads: set = field(default_factory=set)
    scans: set = field(default_factory=set)  # namespaces whose tables were prefix-scanned
    dropped_ns: set = field(default_factory=set)
    ops: list = field(default_factory=list)  # (op name, args, outcome)

    def get(self, k: Key):
        if k not in self.writes:
            self.reads.add(k)
        return self.view.get(k)

    def put(self, k: Key, v) -> None:
        self.writes[k] = v
        if v is None:
            self.view.pop(k, None)
        else:
            self.view[k] = v


# ---- the operations, as the model predicts them (the same code replays them serially) ----
def op_create_ns(m: ModelTxn, ns, val):
    if m.get(ns_key(ns)) is not None:
        return AlreadyExistsError
    m.put(ns_key(ns), val)


def op_drop_ns(m: ModelTxn, ns, cascade):
    if m.get(ns_key(ns)) is None:
        return ObjectNotFoundError
    m.scans.add(ns)
    members = tables_of(m.view, ns)
    if members and not cascade:
        return ValidationError
    for k in members:
        m.put(k, None)
    m.put(ns_key(ns), None)
    m.dropped_ns.add(ns)


def op_alter_ns(m: ModelTxn, ns, val):
    if m.get(ns_key(ns)) is None:
        return ObjectNotFoundError
    m.put(ns_key(ns), val)


def op_create_table(m: ModelTxn, ns, t, val):
    if m.get(ns_key(ns)) is None:
        return ObjectNotFoundError
    if m.get(t_key(ns, t)) is not None:
        return AlreadyExistsError
    m.put(t_key(ns, t), val)


def op_drop_table(m: ModelTxn, ns, t):
    if m.get(t_key(ns, t)) is None:
        m.get(ns_key(ns))
        return ObjectNotFoundError
    m.put(t_key(ns, t), None)


def op_alter_table(m: ModelTxn, ns, t, val):
    if m.get(t_key(ns, t)) is None:
        m.get(ns_key(ns))
        return ObjectNotFoundError
    m.put(t_key(ns, t), val)


def op_table_exists(m: ModelTxn, ns, t):
    return m.get(t_key(ns, t)) is not None


def op_list_tables(m: ModelTxn, ns):
    if m.get(ns_key(ns)) is None:
        return ObjectNotFoundError
    m.scans.add(ns)
    return tuple(k[2] for k in tables_of(m.view, ns))


MODEL_OPS = {
    "create_ns": op_create_ns,
    "drop_ns": op_drop_ns,
    "alter_ns": op_alter_ns,
    "create_table": op_create_table,
    "drop_table": op_drop_table,
    "alter_table": op_alter_table,
    "table_exists": op_table_exists,
    "list_tables": op_list_tables,
}


def run_real(txn, name, args):
    """The same operation on the real transaction; returns the outcome in the model's terms."""
    try:
        if name == "create_ns":
            txn.create_namespace(args[0], {"p": args[1]})
        elif name == "drop_ns":
            txn.drop_namespace(args[0], cascade=args[1])
        elif name == "alter_ns":
            txn.alter_namespace(args[0], {"p": args[1]})
        elif name == "create_table":
            txn.create_table(args[0], args[1], properties={"p": args[2]})
        elif name == "drop_table":
            txn.drop_table(args[0], args[1])
        elif name == "alter_table":
            txn.alter_table(args[0], args[1], set_properties={"p": args[2]})
        elif name == "table_exists":
            return txn.table_exists(*args)
        elif name == "list_tables":
            return tuple(txn.list_tables(args[0]))
    except (AlreadyExistsError, ObjectNotFoundError, ValidationError) as e:
        for cls in (AlreadyExistsError, ObjectNotFoundError, ValidationError):
            if type(e) is cls:
                return cls
        raise
    return None


def read_state(lh: Lakehouse) -> State:
    v = lh.view()
    out: State = {}
    for ns in v.list_namespaces():
        out[ns_key(ns)] = v.describe_namespace(ns)["properties"].get("p")
        for t in v.list_tables(ns):
            out[t_key(ns, t)] = v.describe_table(ns, t)["properties"].get("p")
    return out


def apply(state: State, writes: dict) -> State:
    new = dict(state)
    for k, v in writes.items():
        if v is None:
            new.pop(k, None)
        else:
            new[k] = v
    return new


class InterleavedTransactions(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.uri = f"memory://txn-model-{uuid.uuid4().hex}"
        self.lh = Lakehouse.create(self.uri, order=4, node_max_bytes=4096, audit=False)
        self.history: list[State] = [{}]  # committed state per version
        self.changes: list[dict] = [{}]  # model change set per version
        self.open: list[ModelTxn] = []
        self.n = 0

    @property
    def state(self) -> State:
        return self.history[-1]

    def _val(self) -> str:
        self.n += 1
        return f"v{self.n}"

    # ---- rules
    @initialize(isolations=st.lists(st.sampled_from(ISOLATIONS), min_size=1, max_size=2))
    def start(self, isolations):
        init = {ns_key("a"): "v0", ns_key("b"): "v0", t_key("a", "t1"): "v0", t_key("b", "t2"): "v0"}
        txn = self.lh.begin()
        for k in sorted(init):
            if k[0] == "ns":
                txn.create_namespace(k[1], {"p": "v0"})
            else:
                txn.create_table(k[1], k[2], properties={"p": "v0"})
        txn.commit()
        self.history.append(init)
        self.changes.append(dict(init))
        for iso in isolations:
            self.begin(iso)

    @rule(isolation=st.sampled_from(ISOLATIONS))
    def begin(self, isolation):
        if len(self.open) >= 4:
            return
        real = self.lh.begin(isolation=isolation)
        assert real.begin_version == len(self.history) - 1
        self.open.append(ModelTxn(real, isolation, real.begin_version, dict(self.state), dict(self.state)))

    @rule(
        data=st.data(),
        name=st.sampled_from(sorted(MODEL_OPS)),
        ns=st.sampled_from(NS),
        t=st.sampled_from(TABLES),
        cascade=st.booleans(),
    )
    def operate(self, data, name, ns, t, cascade):
        if not self.open:
            self.begin(data.draw(st.sampled_from(ISOLATIONS)))
        self._run(data.draw(st.sampled_from(self.open)), name, ns, t, cascade)

    def _run(self, m: ModelTxn, name: str, ns: str, t: str, cascade: bool) -> None:
        """One operation on the real transaction and on the model; outcomes must agree."""
        args = {
            "create_ns": (ns, self._val()),
            "drop_ns": (ns, cascade),
            "alter_ns": (ns, self._val()),
            "create_table": (ns, t, self._val()),
            "drop_table": (ns, t),
            "alter_table": (ns, t, self._val()),
            "table_exists": (ns, t),
            "list_tables": (ns,),
        }[name]
        want = MODEL_OPS[name](m, *args)
        got = run_real(m.real, name, args)
        assert got == want, (name, args, got, want)
        m.ops.append((name, args, want))

    @rule(data=st.data())
    def commit(self, data):
        if not self.open:
            return
        self._commit(data.draw(st.sampled_from(self.open)))

    def _commit(self, m: ModelTxn) -> None:
        self.open.remove(m)
        latest = len(self.history) - 1
        if not m.writes:
            assert m.real.commit() is None
            return
        reason = self._conflict(m, latest)
        if reason:
            try:
                m.real.commit()
            except TransactionConflictError:
                pass
            else:
                raise AssertionError(f"expected a conflict ({reason})")
            event(f"conflict ({m.isolation}): {reason.split(' at ')[0]}")
            assert self.lh.latest_version() == latest
            return
        v = m.real.commit()
        assert v == latest + 1
        event(f"commit ({m.isolation}) after concurrent versions" if latest > m.base_version else "commit without rebase")
        # Serial correctness: replay the operations on the state at commit.
        replay = ModelTxn(None, m.isolation, latest, dict(self.state), dict(self.state))
        for name, args, outcome in m.ops:
            if m.isolation == "snapshot" and isinstance(outcome, type):
                continue  # a failed op has no effect; under SNAPSHOT it may be decided on old reads
            again = MODEL_OPS[name](replay, *args)
            if m.isolation == "serializable" or name not in ("table_exists", "list_tables"):
                assert again == outcome, f"not serializable: {name}{args} gave {outcome}, serially {again}"
        assert apply(self.state, replay.writes) == apply(self.state, m.writes)
        self.changes.append(dict(m.writes))
        self.history.append(apply(self.state, m.writes))

    @rule(data=st.data(), k=st.integers(2, 3), isolations=st.lists(st.sampled_from(ISOLATIONS), min_size=3, max_size=3))
    def concurrent_round(self, data, k, isolations):
        """k transactions begin together, run 1-3 interleaved operations each, and commit in a
        random order: the interesting case, so it gets a rule of its own."""
        for m in list(self.open):
            self._commit(m)
        for iso in isolations[:k]:
            self.begin(iso)
        txns = list(self.open)
        for _ in range(data.draw(st.integers(k, 3 * k))):
            self._run(
                data.draw(st.sampled_from(txns)),
                data.draw(st.sampled_from(sorted(MODEL_OPS))),
                data.draw(st.sampled_from(NS)),
                data.draw(st.sampled_from(TABLES)),
                data.draw(st.booleans()),
            )
        for m in data.draw(st.permutations(txns)):
            self._commit(m)

    @rule(ns=st.sampled_from(NS), t=st.sampled_from(TABLES))
    def other_writer(self, ns, t):
        """A one-operation transaction committed at once (another writer)."""
        self.begin("snapshot")
        m = self.open[-1]
        if m.get(ns_key(ns)) is None:
            name, args = "create_ns", (ns, self._val())
        elif m.get(t_key(ns, t)) is None:
            name, args = "create_table", (ns, t, self._val())
        else:
            name, args = "alter_table", (ns, t, self._val())
        m.reads.clear()
        assert MODEL_OPS[name](m, *args) is None
        assert run_real(m.real, name, args) is None
        m.ops.append((name, args, None))
        self.open.remove(m)
        self.open.append(m)
        self._commit(m)

    @rule(data=st.data())
    def abandon(self, data):
        if not self.open:
            return
        m = data.draw(st.sampled_from(self.open))
        self.open.remove(m)
        m.real.rollback()

    # ---- the rules of FORMAT.md §6, as the model reads them
    def _conflict(self, m: ModelTxn, latest: int) -> str | None:
        def ns_created_or_dropped(k, v):
            return v is None or k not in m.base

        my_ns = {k[1] for k, v in m.writes.items() if k[0] == "ns" and (k[1] in m.dropped_ns or ns_created_or_dropped(k, v))}
        for u in range(m.base_version + 1, latest + 1):
            cs = self.changes[u]
            if set(cs) & set(m.writes):
                return f"write-write at {u}"
            changed_ns = {k[1] for k, v in cs.items() if k[0] == "ns" and ns_created_or_dropped(k, v)}
            if any(k[0] == "t" and k[1] in changed_ns for k in m.writes):
                return f"namespace created/dropped at {u}"
            if any(k[0] == "t" and k[1] in my_ns for k in cs):
                return f"object changed at {u} in a namespace this txn creates/drops"
            if m.isolation == "serializable":
                if set(cs) & m.reads:
                    return f"read set at {u}"
                if any(k[0] == "t" and k[1] in m.scans for k in cs):
                    return f"scan at {u}"
        return None

    # ---- checks
    @invariant()
    def lakehouse_equals_model(self):
        fresh = Lakehouse.open(self.uri, audit=False)
        assert fresh.latest_version() == len(self.history) - 1
        assert read_state(fresh) == self.state

    def teardown(self):
        for m in self.open:
            m.real.rollback()
        self.lh.storage.fs.rm(self.lh.storage._parsed.fs_path, recursive=True)


InterleavedTransactions.TestCase.settings = settings(
    max_examples=int(os.environ.get("HYP_N", 25)),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestInterleavedTransactions = InterleavedTransactions.TestCase
