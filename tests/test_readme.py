"""The README's shell blocks run as written.

Every ```bash block of README.md carries a marker on the line before it:

* ``<!-- readme-test: run -->``: this test runs it, in README order, in one bash process
  (``set -euo pipefail``: a failing line fails the test), from a fresh folder, with the main
  virtualenv on ``PATH`` (as ``source .venv/bin/activate`` puts it) and ``HOME`` in that folder;
* ``<!-- readme-test: elsewhere: ... -->``: a block that needs a real cluster or workspace, or
  that another test runs; the marker names that test, which must exist.

So a new block cannot go unchecked without saying so. What the run changes, and why:

* S3 is the tests' moto server: ``TLAKE_S3_ENDPOINT_URL`` and fake keys in the environment, as
  a user's shell would have them; each bucket the blocks name gets a prefix of this run (the
  server is shared with the session's other tests) and is created first; the DR endpoint
  (``https://s3.dr.example.com``) is that server too.
* Local paths under ``/tmp/`` move into the test's folder (two runs never meet).
* ``control redact`` is about an existing lakehouse's rows: one is created at its URI first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = re.compile(r"<!-- readme-test: (run|elsewhere: (?P<why>.+?)) -->")
FENCE = "```bash\n"
DR_ENDPOINT = "https://s3.dr.example.com"


def blocks() -> list[tuple[str, str | None, str, int]]:
    """(kind, why, code, line) of every bash block: kind is "run", "elsewhere" or "" (no marker)."""
    text = README.read_text(encoding="utf-8")
    out = []
    pos = 0
    while (start := text.find(FENCE, pos)) >= 0:
        end = text.index("```", start + len(FENCE))
        before = text[:start].rstrip("\n").rsplit("\n", 1)[-1]
        m = MARKER.fullmatch(before.strip())
        kind = "" if m is None else ("run" if m.group(1) == "run" else "elsewhere")
        out.append((kind, m.group("why") if m else None, text[start + len(FENCE):end], text.count("\n", 0, start) + 1))
        pos = end + 3
    return out


def test_every_block_says_how_it_is_checked():
    found = blocks()
    assert any(kind == "run" for kind, *_ in found)
    for kind, why, code, line in found:
        assert kind, f"README.md:{line}: a bash block without a readme-test marker:\n{code[:200]}"
        if kind == "elsewhere":
            for path in re.findall(r"tests/[\w/]+\.py", why or ""):
                assert (ROOT / path).is_file(), f"README.md:{line}: the marker names {path}, which does not exist"


def _script(tmp: Path, buckets: dict[str, str], endpoint: str) -> str:
    parts = []
    for kind, _why, code, line in blocks():
        if kind != "run":
            continue
        if "control redact" in code:
            # The rows of "earlier versions" belong to a lakehouse that exists.
            uri = re.search(r"--lakehouse (\S+)", code).group(1)  # type: ignore[union-attr]
            parts.append(f"tlake --lakehouse {uri} init >/dev/null")
        parts.append(f"echo '---- README.md:{line}' >&2\n{code}")
    script = "\n".join(parts)
    for name, prefixed in buckets.items():
        script = script.replace(f"s3://{name}/", f"s3://{prefixed}/")
    return script.replace(DR_ENDPOINT, endpoint).replace("/tmp/", f"{tmp}/tmp/")


@pytest.mark.s3
@pytest.mark.spark  # `tlake` processes with the package's imports: seconds each
def test_run_blocks_run_as_written(s3_server, tmp_path):
    script = "\n".join(code for kind, _w, code, _l in blocks() if kind == "run")
    names = sorted(set(re.findall(r"s3://([a-z0-9][a-z0-9.-]+)/", script)))
    tag = uuid.uuid4().hex[:8]
    buckets = {name: f"rt-{tag}-{name}" for name in names}
    for prefixed in buckets.values():
        s3_server.create_bucket(prefixed)
    home = tmp_path / "home"
    work = tmp_path / "work"
    for d in (home, work, tmp_path / "tmp"):
        d.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TLAKE_", "PYSPARK_", "SPARK_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "TLAKE_S3_ENDPOINT_URL": s3_server.endpoint_url, "AWS_ACCESS_KEY_ID": s3_server.key,
            "AWS_SECRET_ACCESS_KEY": s3_server.secret, "AWS_DEFAULT_REGION": s3_server.region}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", _script(tmp_path, buckets, s3_server.endpoint_url)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    ran = re.findall(r"---- (README\.md:\d+)", proc.stderr)
    assert proc.returncode == 0, (f"the README's block at {ran[-1] if ran else '?'} failed ({proc.returncode}):\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
    assert len(ran) == sum(1 for kind, *_ in blocks() if kind == "run")
    assert "Traceback" not in proc.stdout + proc.stderr
    # What the tour says it leaves: an export on S3, a report beside the commands.
    listed = s3_server.client.list_objects_v2(Bucket=buckets["backup"], Prefix="lh-weekly-1/")
    assert listed.get("KeyCount", 0) > 0
    assert (work / "report.html").is_file()
