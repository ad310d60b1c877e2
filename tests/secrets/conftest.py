"""Helpers of the secrets tests: unique planted secrets, `tlake` and job subprocesses whose
output is kept, and scanners for local folders and S3 buckets (Parquet read as rows too, so a
compressed column cannot hide a value)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _text_of(name: str, data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    if name.endswith(".parquet"):
        try:
            text += json.dumps(pq.read_table(io.BytesIO(data)).to_pylist(), default=str)
        except Exception:  # noqa: BLE001 - a partial/foreign file: its bytes were scanned already
            pass
    return text


@dataclass
class Planted:
    """Unique secrets by channel, and everything the processes under test printed."""

    secrets: dict[str, str] = field(default_factory=dict)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def new(self, channel: str, prefix: str = "Sx") -> str:
        value = f"{prefix}{channel.replace('_', '')[:10]}{uuid.uuid4().hex[:14]}"
        self.secrets[channel] = value
        return value

    def hits(self, text: str) -> list[str]:
        return [ch for ch, s in self.secrets.items() if s in text]

    def _run(self, cmd: list[str], label: str, *, cwd: Path, stdin: str | None, ok: bool,
             env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **self.env, **(env or {})}
        p = subprocess.run(cmd, capture_output=True, text=True, env=full_env, input=stdin, cwd=cwd, timeout=600)
        self.outputs.append((f"{label} (stdout)", p.stdout))
        self.outputs.append((f"{label} (stderr)", p.stderr))
        if ok and p.returncode != 0:
            pytest.fail(f"{label} exited {p.returncode}: {p.stderr[-2000:]}")
        if not ok and p.returncode == 0:
            pytest.fail(f"{label} was expected to fail")
        return p

    def tlake(self, args: list[str], *, cwd: Path, stdin: str | None = None, ok: bool = True,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        words, skip = [], False
        for a in args:  # the command, without the global options and their values
            if not skip and a not in ("--lakehouse", "--storage-option", "--log-level"):
                words.append(a)
            skip = a in ("--lakehouse", "--storage-option", "--log-level")
        label = "tlake " + " ".join(words)[:60]
        return self._run([sys.executable, "-m", "trinitylake", *args], label, cwd=cwd, stdin=stdin, ok=ok, env=env)

    def job(self, job: str, args: list[str], *, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """A job as spark-submit / Airflow runs it: `jobs/<job>.py`, whose stdout is the XCom."""
        return self._run([sys.executable, str(ROOT / "jobs" / f"{job}.py"), *args], f"jobs/{job}.py", cwd=cwd,
                         stdin=None, ok=ok, env=None)

    def leaks_in_outputs(self) -> list[str]:
        return [f"{label}: {self.hits(text)}" for label, text in self.outputs if self.hits(text)]

    def leaks_in_dir(self, root: Path) -> list[str]:
        found = []
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = Path(dirpath) / name
                hits = self.hits(_text_of(name, path.read_bytes()))
                if hits:
                    found.append(f"{path.relative_to(root)}: {hits}")
        return found

    def leaks_in_bucket(self, client: Any, bucket: str) -> list[str]:
        found = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                data = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                hits = self.hits(_text_of(obj["Key"], data))
                if hits:
                    found.append(f"s3://{bucket}/{obj['Key']}: {hits}")
        return found


@pytest.fixture
def planted() -> Planted:
    return Planted()
