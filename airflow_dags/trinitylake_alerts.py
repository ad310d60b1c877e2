"""Failure alerts and the one-lakehouse guard of the TrinityLake maintenance DAGs.

* :class:`MaintenanceFailureNotifier`: the DAGs' ``on_failure_callback`` (every task and the
  DAG run). It logs one ERROR line naming the DAG, task, run, the lakehouse (the task's
  rendered ``--lakehouse``, else the param, else the ``trinitylake_lakehouse`` Variable) and a
  runnable ``tlake --lakehouse <uri> show --job <job>`` command that lists the job's runs, and hands the same message to a hook the
  deployment chooses: the Variable ``trinitylake_failure_hook`` (UI, secrets backend or
  ``AIRFLOW_VAR_TRINITYLAKE_FAILURE_HOOK``) naming ``package.module:function``, called with
  the message dict (post to Slack, open a page, ...). No hook set: the log line is the alert.
* :func:`check_no_sibling_running`: the first task of each DAG. Both DAGs maintain the same
  lakehouse, and two maintenance pipelines on one lakehouse at once (an orphan cleanup next to
  an export) is what the docs forbid; ``max_active_runs=1`` only covers one DAG. The guard
  fails the run when the other DAG has a queued or running run; the failure is alerted.
"""

from __future__ import annotations

import importlib
import logging
import shlex
from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseNotifier

log = logging.getLogger("airflow.task")

FAILURE_HOOK_VARIABLE = "trinitylake_failure_hook"
LAKEHOUSE_VARIABLE = "trinitylake_lakehouse"
ACTIVE_STATES = ["queued", "running"]


def _rendered_lakehouse(task: Any) -> str | None:
    """``--lakehouse`` of the task's rendered arguments (the lakehouse the job ran on)."""
    args = getattr(task, "application_args", None)
    if args is None:
        args = (getattr(task, "spark_python_task", None) or {}).get("parameters")
    args = list(args or [])
    if "--lakehouse" in args[:-1]:
        value = str(args[args.index("--lakehouse") + 1])
        if value and "{{" not in value:
            return value
    return None


def read_variable(key: str) -> str | None:
    """An Airflow Variable from wherever this callback runs. In a task the Task SDK reads it
    through the API server; a DAG-run callback of `airflow dags test` runs in the CLI process,
    where the SDK quietly answers None for a Variable that is set: the metadata database is read
    there. None when neither has it (an alert never fails on its own lookup)."""
    try:
        from airflow.sdk import Variable

        value = Variable.get(key, default=None)
    except Exception:  # noqa: BLE001
        value = None
    if value in (None, ""):
        try:
            from airflow.models import Variable as StoredVariable

            value = StoredVariable.get(key, default_var=None)
        except Exception:  # noqa: BLE001 - no database here (a task process): the SDK's answer stands
            value = None
    return None if value in (None, "") else str(value)


def lakehouse_of(context: dict[str, Any]) -> str:
    """The lakehouse a failed run was maintaining: the task's rendered ``--lakehouse``, else the
    ``lakehouse`` param, else the ``trinitylake_lakehouse`` Variable, else the DAG's default."""
    found = _rendered_lakehouse(context.get("task") or getattr(context.get("ti"), "task", None))
    found = found or (context.get("params") or {}).get("lakehouse")
    if not found:
        try:
            found = context["var"]["value"].get(LAKEHOUSE_VARIABLE, None)
        except Exception:  # noqa: BLE001 - no accessor in this context: ask the Variable API
            found = None
    found = found or read_variable(LAKEHOUSE_VARIABLE)
    if not found:
        from trinitylake_tasks import DEFAULT_LAKEHOUSE

        found = DEFAULT_LAKEHOUSE
    return str(found)


def failure_message(context: dict[str, Any]) -> dict[str, Any]:
    """What an alert says, from the task (or DAG) callback context."""
    ti = context.get("ti") or context.get("task_instance")
    dag = context.get("dag")
    dag_run = context.get("dag_run")
    task_id = getattr(ti, "task_id", None)
    job = task_id.removesuffix("_dry_run").removesuffix("_weekly") if task_id else None
    lakehouse = lakehouse_of(context)
    msg = {
        "dag_id": getattr(dag, "dag_id", None) or getattr(ti, "dag_id", None),
        "task_id": task_id,
        "run_id": getattr(dag_run, "run_id", None) or context.get("run_id"),
        "try_number": getattr(ti, "try_number", None),
        "lakehouse": lakehouse,
        "error": str(context.get("exception") or context.get("reason") or ""),
        "log_url": getattr(ti, "log_url", None),
        # Runnable as it stands: the lakehouse quoted for a shell, the job's own runs.
        "command": f"tlake --lakehouse {shlex.quote(lakehouse)} show" + (f" --job {job}" if job else ""),
    }
    msg["text"] = (f"TrinityLake maintenance failed: {msg['dag_id']}.{task_id or '(run)'} run {msg['run_id']} "
                   f"on {lakehouse}: {msg['error'] or 'see the task log'}"
                   + f" - its runs: {msg['command']}")
    return msg


def resolve_hook(spec: str) -> Callable[[dict[str, Any]], Any]:
    """``package.module:function`` -> the function (a typo fails loudly in the callback log)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{FAILURE_HOOK_VARIABLE} must be 'package.module:function', got {spec!r}")
    return getattr(importlib.import_module(module), name)


class MaintenanceFailureNotifier(BaseNotifier):
    """``on_failure_callback`` of the maintenance DAGs (see the module docstring)."""

    template_fields = ("hook",)

    def __init__(self, hook: str | None = None):
        super().__init__()
        # The Variable is read when the callback runs (a template), never at parse time.
        self.hook = hook if hook is not None else "{{ var.value.get('" + FAILURE_HOOK_VARIABLE + "', '') }}"

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """As BaseNotifier's, also where the DAG-run callback gets a SerializedDAG without a
        template environment (Airflow 3.3's `airflow dags test` runs DAG callbacks so): the hook
        Variable is then read through the Variable API."""
        templated = "{{" in (self.hook or "")
        try:
            super().render_template_fields(context, jinja_env)
        except AttributeError:
            self.hook = ""
        if templated and not self.hook:
            # Rendered empty or not at all: the Variable as the run's tasks read it.
            self.hook = read_variable(FAILURE_HOOK_VARIABLE) or ""

    def notify(self, context: dict[str, Any]) -> None:
        msg = failure_message(context)
        log.error("%s", msg["text"])
        if self.hook:
            resolve_hook(self.hook)(msg)
        else:
            log.info("no %s Variable: the ERROR line above is the alert", FAILURE_HOOK_VARIABLE)


def check_no_sibling_running(sibling_dag_id: str, count_runs: Callable[[str, list[str]], int]) -> None:
    """Raise when `sibling_dag_id` has a queued or running run (the other DAG is maintaining
    the lakehouse right now). `count_runs(dag_id, states)` counts DAG runs."""
    active = count_runs(sibling_dag_id, ACTIVE_STATES)
    if active:
        raise RuntimeError(
            f"{sibling_dag_id} has {active} active run(s) against the same lakehouse: the two maintenance DAGs "
            f"must never run at once. Pause one of them (unpause exactly one), then clear this run.")


def guard_callable(sibling_dag_id: str) -> Callable[..., None]:
    """The python_callable of the guard task: counts the sibling's runs through the Task SDK
    (the API server; a task never opens the metadata database itself)."""

    def guard(**_: Any) -> None:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        check_no_sibling_running(sibling_dag_id,
                                 lambda dag_id, states: RuntimeTaskInstance.get_dr_count(dag_id=dag_id, states=states))

    return guard
