"""Iceberg's own REST Compatibility Kit against `tlake catalog serve` (issue 53, item 5).

The kit is ``RESTCompatibilityKitSuite`` of Iceberg 1.11.0: ``CatalogTests`` and ``ViewCatalogTests``
as Maven Central publishes them, compiled, assertions untouched (`make rck` copies the jars of
tests/rest_catalog/rck/pom.xml into tests/rest_catalog/rck/lib). JUnit's console launcher runs it
against the real server on a fresh lakehouse; its JUnit XML is parsed here and every failed test is
listed with its message.

Configuration only, through the kit's system properties: ``rck.local=false`` (no in-process
reference server), the server's ``uri``, ``token`` and ``warehouse``, and the capabilities the
server declares (``rck.*``). A skipped test passes only when it is one of `ALLOWED_SKIPS`: a
capability the server honestly declares absent (nested namespaces, names with a dot or a slash),
or one the kit skips against every server.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from tests.rest_catalog.server import new_lakehouse, start

RCK_LIB = Path(__file__).resolve().parent / "rck" / "lib"
SUITE = "org.apache.iceberg.rest.RESTCompatibilityKitSuite"
#: What the server declares to the kit (RCKUtils reads these system properties).
DECLARED = {
    # a table in a namespace that does not exist answers 404: the namespace must be created first
    "rck.requires-namespace-create": "true",
    # a commit's updates are applied to the current metadata when its requirements hold
    "rck.supports-serverside-retry": "true",
    # names with a dot are refused (a dot separates the levels of a namespace)
    "rck.supports-names-with-dot": "false",
    # the server keeps the location a create asks for
    "rck.overrides-requested-location": "false",
}
#: The only skips allowed, by test, with why. Capabilities the server declares absent: nested
#: namespaces (the lakehouse has one level; the kit's CatalogTests ask supportsNestedNamespaces, false
#: for the kit), names with a dot (rck.supports-names-with-dot=false above) or a slash (false for the
#: kit). Besides those, the kit skips six tests against every server, whatever it declares: the
#: empty (root) namespace tests (CatalogTests' supportsEmptyNamespace, which the kit leaves false and
#: offers no property for) and one test the kit marks @Disabled.
ALLOWED_SKIPS = {
    "CatalogTests.testListNestedNamespaces": "nested namespaces",
    "CatalogTests.testDropNamespaceWithNestedNamespace": "nested namespaces",
    "CatalogTests.testNamespaceWithDot": "names with a dot",
    "CatalogTests.testTableNameWithDot": "names with a dot",
    "CatalogTests.testNamespaceWithSlash": "names with a slash",
    "CatalogTests.testTableNameWithSlash": "names with a slash",
    "CatalogTests.createAndDropEmptyNamespace": "the kit's own: the empty namespace",
    "CatalogTests.listNamespacesWithEmptyNamespace": "the kit's own: the empty namespace",
    "CatalogTests.listTablesInEmptyNamespace": "the kit's own: the empty namespace",
    "CatalogTests.namespacePropertiesOnEmptyNamespace": "the kit's own: the empty namespace",
    "ViewCatalogTests.listViewsInEmptyNamespace": "the kit's own: the empty namespace",
    "CatalogTests.createTableInUniqueLocation": "the kit's own: @Disabled",
}
KIT_TIMEOUT_S = 600

pytestmark = pytest.mark.slow


def run_kit(url: str, token: str, warehouse: str, reports: Path, out: Path) -> subprocess.CompletedProcess[str]:
    props = {"rck.local": "false", "uri": f"{url}/", "token": token, "warehouse": warehouse, **DECLARED}
    cmd = ["java", "-Xmx768m", "-XX:TieredStopAtLevel=1", *(f"-D{k}={v}" for k, v in props.items()),
           "-cp", f"{RCK_LIB}/*", "org.junit.platform.console.ConsoleLauncher", "execute",
           "--config", "rck.local=false", "--select-class", SUITE, "--reports-dir", str(reports),
           "--details=summary", "--disable-banner"]
    with open(out, "w") as log:
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, timeout=KIT_TIMEOUT_S)


def message(el: ET.Element) -> str:
    """A failure's message without its stack trace, on one line."""
    text = el.get("message") or el.text or ""
    text = re.split(r"\n\s*Throwable that failed the check|\n\s*at |\n\s*\.\.\.\(\d+ remaining", text)[0]
    return re.sub(r"\s+", " ", text).strip()


def outcomes(report: Path) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]]]:
    """(passed, failed, skipped) of the kit's JUnit XML: names ``Class.method``, with the message."""
    passed, failed, skipped = [], [], []
    for tc in ET.parse(report).getroot().iter("testcase"):
        cls = tc.get("classname", "").rsplit(".", 1)[-1].replace("RESTCompatibilityKit", "")
        name = f"{cls}.{tc.get('name', '').removesuffix('()')}"
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        skip = tc.find("skipped")
        if bad is not None:
            failed.append((name, message(bad)))
        elif skip is not None:
            skipped.append((name, message(skip)))
        else:
            passed.append(name)
    return passed, failed, skipped


def unallowed_skips(skipped: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(n, m) for n, m in skipped if n not in ALLOWED_SKIPS]


def test_outcomes_parser_reads_failures_errors_and_skips(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text("""<testsuite>
      <testcase classname="org.apache.iceberg.rest.RESTCompatibilityKitCatalogTests" name="testA()"/>
      <testcase classname="org.apache.iceberg.rest.RESTCompatibilityKitCatalogTests" name="testB()">
        <failure message="Expected 404&#10;  but was 500">org.opentest4j.AssertionFailedError
        at org.apache.iceberg.X</failure></testcase>
      <testcase classname="org.apache.iceberg.rest.RESTCompatibilityKitViewCatalogTests" name="testC()">
        <error message="boom"/></testcase>
      <testcase classname="org.apache.iceberg.rest.RESTCompatibilityKitCatalogTests" name="testListNestedNamespaces()">
        <skipped message="Assumption failed: supportsNestedNamespaces"/></testcase>
      <testcase classname="org.apache.iceberg.rest.RESTCompatibilityKitCatalogTests" name="testE()">
        <skipped message="Assumption failed: needs a v9 table"/></testcase>
    </testsuite>""")
    passed, failed, skipped = outcomes(report)
    assert passed == ["CatalogTests.testA"]
    assert failed == [("CatalogTests.testB", "Expected 404 but was 500"), ("ViewCatalogTests.testC", "boom")]
    assert unallowed_skips(skipped) == [("CatalogTests.testE", "Assumption failed: needs a v9 table")]


def test_iceberg_rest_compatibility_kit_passes_against_the_server(tmp_path):
    jars = sorted(RCK_LIB.glob("*.jar")) if RCK_LIB.is_dir() else []
    names = {j.name for j in jars}
    missing = [n for n in ("iceberg-open-api-1.11.0-tests.jar", "iceberg-core-1.11.0-tests.jar",
                           "junit-platform-console-standalone-1.14.4.jar") if n not in names]
    assert not missing, f"the kit's jars are not in {RCK_LIB} (run `make rck`): missing {missing}"

    lakehouse = new_lakehouse(tmp_path / "lh")
    server = start(lakehouse, tmp_path)
    reports, out = tmp_path / "reports", tmp_path / "kit.out"
    try:
        run = run_kit(server.url, server.token, lakehouse, reports, out)
    finally:
        server.stop()
    report = reports / "TEST-junit-platform-suite.xml"
    assert report.is_file(), f"the kit wrote no report (exit {run.returncode}): {out.read_text()[-3000:]}"
    passed, failed, skipped = outcomes(report)
    assert passed or failed, f"the kit ran no test: {out.read_text()[-3000:]}"

    problems = [f"FAILED  {n}: {m[:500]}" for n, m in sorted(failed)]
    problems += [f"SKIPPED {n} (not a capability the server declares absent): {m[:300]}"
                 for n, m in sorted(unallowed_skips(skipped))]
    by_class = Counter(n.split(".")[0] for n, _ in failed)
    assert not problems, (
        f"Iceberg's REST Compatibility Kit: {len(passed)} passed, {len(failed)} failed "
        f"({dict(by_class)}), {len(skipped)} skipped; server log {server.log}\n" + "\n".join(problems))
    assert server.token not in server.output()
