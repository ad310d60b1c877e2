"""Airflow settings for the DAG tests (run in .venv-airflow by `make test-dags`).

Airflow reads its configuration when it is first imported, so the environment is set here,
before any test module imports it: a throw-away AIRFLOW_HOME (no ~/airflow, no database),
no example DAGs, and the repository's airflow_dags/ as the DAG folder. In the main virtualenv
Airflow is absent and this file does nothing.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

DAG_FOLDER = Path(__file__).resolve().parents[2] / "airflow_dags"

if importlib.util.find_spec("airflow") is not None:
    _home = tempfile.mkdtemp(prefix="tlake-airflow-home-")
    os.environ["AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAG_FOLDER)
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_home}/airflow.db"
    # The DAG file reads these Variables from the environment; pin them to the defaults.
    for _name in list(os.environ):
        if _name.startswith("AIRFLOW_VAR_TRINITYLAKE_"):
            del os.environ[_name]
