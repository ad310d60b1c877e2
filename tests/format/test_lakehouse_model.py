"""Model-based test of the whole format: random namespace/table operations at order 4 (so the
tree grows several levels and shrinks again) against a plain dict model.

After every commit the latest version must equal the model, read through a fresh `Lakehouse`
(no caches); every older version must still equal the model's snapshot of that version.
"""

from __future__ import annotations

import copy
import os
import uuid

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trinitylake.errors import AlreadyExistsError, ObjectNotFoundError, ValidationError
from trinitylake.lakehouse import Lakehouse

NAMESPACES = ["a", "bb", "日本", "z.z"]
TABLES = [f"t{i}" for i in range(9)] + ["é", "T"]

Model = dict[str, dict]  # ns -> {"props": {...}, "tables": {t: props}}


def read_state(lh: Lakehouse, version: int | None = None) -> Model:
    v = lh.view(version=version)
    out: Model = {}
    for ns in v.list_namespaces():
        out[ns] = {
            "props": v.describe_namespace(ns)["properties"],
            "tables": {t: v.describe_table(ns, t)["properties"] for t in v.list_tables(ns)},
        }
    return out


class LakehouseMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.uri = f"memory://model-{uuid.uuid4().hex}"
        kwargs = {"order": 4, "node_max_bytes": 4096, "audit": False}
        if uuid.uuid4().int % 2:
            kwargs["properties"] = {"tlake.buffer.max-messages": "2"}
        self.lh = Lakehouse.create(self.uri, **kwargs)
        self.model: Model = {}
        self.history: list[Model] = [{}]
        self.counter = 0

    # ---- helpers
    def _expect(self, fn, error):
        before = self.lh.latest_version()
        if error is None:
            v = fn()
            assert v == before + 1
            self.history.append(copy.deepcopy(self.model))
            return
        try:
            fn()
        except error:
            pass
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert self.lh.latest_version() == before

    def _prop(self) -> str:
        self.counter += 1
        return str(self.counter)

    # ---- rules
    @rule(ns=st.sampled_from(NAMESPACES))
    def create_namespace(self, ns):
        err = AlreadyExistsError if ns in self.model else None
        p = self._prop()
        if err is None:
            self.model[ns] = {"props": {"p": p}, "tables": {}}
        self._expect(lambda: self.lh.create_namespace(ns, {"p": p}), err)

    @rule(ns=st.sampled_from(NAMESPACES), cascade=st.booleans())
    def drop_namespace(self, ns, cascade):
        if ns not in self.model:
            err = ObjectNotFoundError
        elif self.model[ns]["tables"] and not cascade:
            err = ValidationError
        else:
            err = None
            del self.model[ns]
        self._expect(lambda: self.lh.drop_namespace(ns, cascade=cascade), err)

    @rule(ns=st.sampled_from(NAMESPACES))
    def alter_namespace(self, ns):
        p = self._prop()
        err = None if ns in self.model else ObjectNotFoundError
        if err is None:
            self.model[ns]["props"]["p"] = p
            self.model[ns]["props"].pop("q", None)

        def go():
            t = self.lh.begin()
            t.alter_namespace(ns, {"p": p}, ["q"])
            return t.commit()

        self._expect(go, err)

    @rule(ns=st.sampled_from(NAMESPACES), t=st.sampled_from(TABLES))
    def create_table(self, ns, t):
        if ns not in self.model:
            err = ObjectNotFoundError
        elif t in self.model[ns]["tables"]:
            err = AlreadyExistsError
        else:
            err = None
        p = self._prop()
        if err is None:
            self.model[ns]["tables"][t] = {"p": p}
        self._expect(lambda: self.lh.create_table(ns, t, properties={"p": p}), err)

    @rule(ns=st.sampled_from(NAMESPACES), t=st.sampled_from(TABLES))
    def drop_table(self, ns, t):
        err = None if t in self.model.get(ns, {}).get("tables", {}) else ObjectNotFoundError
        if err is None:
            del self.model[ns]["tables"][t]
        self._expect(lambda: self.lh.drop_table(ns, t), err)

    @rule(ns=st.sampled_from(NAMESPACES), t=st.sampled_from(TABLES))
    def alter_table(self, ns, t):
        err = None if t in self.model.get(ns, {}).get("tables", {}) else ObjectNotFoundError
        p = self._prop()
        if err is None:
            self.model[ns]["tables"][t]["p"] = p

        def go():
            x = self.lh.begin()
            x.alter_table(ns, t, set_properties={"p": p})
            return x.commit()

        self._expect(go, err)

    @rule(ns=st.sampled_from(NAMESPACES), tables=st.lists(st.sampled_from(TABLES), min_size=2, max_size=6, unique=True))
    def fill_namespace_in_one_txn(self, ns, tables):
        """Many keys in one commit: more messages than the buffer allows."""
        if ns in self.model:
            return
        p = self._prop()
        self.model[ns] = {"props": {}, "tables": {t: {"p": p} for t in tables}}

        def go():
            x = self.lh.begin()
            x.create_namespace(ns)
            for t in tables:
                x.create_table(ns, t, properties={"p": p})
            return x.commit()

        self._expect(go, None)

    @precondition(lambda self: len(self.history) > 2)
    @rule(data=st.data())
    def rollback(self, data):
        latest = len(self.history) - 1
        to = data.draw(st.integers(0, latest - 1))
        self.model = copy.deepcopy(self.history[to])
        self._expect(lambda: self.lh.rollback(to), None)

    # ---- checks
    @invariant()
    def latest_equals_model(self):
        fresh = Lakehouse.open(self.uri, audit=False)
        assert fresh.latest_version() == len(self.history) - 1
        assert read_state(fresh) == self.model

    @invariant()
    def an_older_version_is_unchanged(self):
        if len(self.history) > 1:
            v = (self.counter * 7919) % (len(self.history) - 1)
            assert read_state(Lakehouse.open(self.uri, audit=False), v) == self.history[v]

    def teardown(self):
        fresh = Lakehouse.open(self.uri, audit=False)
        depth, node = 1, fresh.load_root(fresh.latest_version()).node
        store = fresh.node_store(fresh.storage)
        while node.children:
            depth, node = depth + 1, store.load(node.children[0])
        event(f"final tree depth {depth}")
        for v, snap in enumerate(self.history):
            assert read_state(fresh, v) == snap, f"version {v}"
        fresh.storage.fs.rm(fresh.storage._parsed.fs_path, recursive=True)


LakehouseMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("HYP_N", 20)), stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestLakehouseModel = LakehouseMachine.TestCase
