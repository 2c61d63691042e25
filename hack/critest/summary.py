#!/usr/bin/env python3
"""Counts one critest run from ginkgo's JUnit report (critest.sh calls it).

usage: summary.py LABEL SCOPE JUNIT SKIPS COUNTS SECONDS RC
  SCOPE   conformance (every spec but NRI's) or nri (NRI's only): the specs
          of the other scope, and the benchmark specs critest leaves out of a
          validation run, are not counted
  SKIPS   the run's -ginkgo.skip list: lines "REGEX<TAB>reason"
  COUNTS  written: "PASSED FAILED SKIPPED"
  RC      critest's exit code
Prints "critest.sh: LABEL: N passed, N failed, N skipped (...)", then the
failed specs and the skipped ones with their reasons. Exits 1 when the run
did not run (no report) or a spec or suite node failed.
"""
import re
import sys
import xml.etree.ElementTree as ET

label, scope, junit, skips_file, counts_file, secs, rc = sys.argv[1:8]
skips = []
for line in open(skips_file, encoding="utf-8"):
    line = line.rstrip("\n")
    if line:
        rx, _, why = line.partition("\t")
        skips.append((re.compile(rx), why))
NRI = re.compile(r"\bNRI\b")
BENCH = re.compile(r"benchmark")

try:
    root = ET.parse(junit).getroot()
except (OSError, ET.ParseError) as e:
    print(f"critest.sh: {label}: did not run (no JUnit report: {e}; critest exited {rc})")
    open(counts_file, "w").close()
    sys.exit(1)

passed, failed, skipped, unselected = [], [], [], 0
for tc in root.iter("testcase"):
    name = tc.get("name", "")
    status = tc.get("status", "")
    spec = name.startswith("[It] ")
    text = name[5:] if spec else name
    if not spec:
        # suite nodes ([BeforeSuite], [ReportAfterSuite], ...): only a failure counts
        if status not in ("passed", "skipped", ""):
            fl = tc.find("failure")
            msg = (fl.get("message", "") if fl is not None else "").strip().splitlines()
            failed.append((text, status + (": " + msg[0][:300] if msg else "")))
        continue
    if BENCH.search(text) or bool(NRI.search(text)) != (scope == "nri"):
        continue
    if status == "passed":
        passed.append(text)
    elif status in ("skipped", "pending"):
        sk = tc.find("skipped")
        msg = (sk.get("message", "") if sk is not None else status).strip()
        if msg.startswith("skipped - "):
            skipped.append((text, "critest: " + msg[len("skipped - "):]))
            continue
        why = next((w for rx, w in skips if rx.search(text)), None)
        if why is None:
            unselected += 1  # left out by a -ginkgo.focus of CRITEST_ARGS
        else:
            skipped.append((text, "critest.sh: " + why))
    else:
        fl = tc.find("failure")
        msg = (fl.get("message", "") if fl is not None else "").strip().splitlines()
        failed.append((text, status + (": " + msg[0][:300] if msg else "")))

with open(counts_file, "w") as f:
    f.write(f"{len(passed)} {len(failed)} {len(skipped)}\n")
extra = f", {unselected} not selected" if unselected else ""
print(f"critest.sh: {label}: {len(passed)} passed, {len(failed)} failed, "
      f"{len(skipped)} skipped{extra} ({secs}s)")
for text, status in failed:
    print(f"  FAILED: {text} -- {status}")
for text, why in skipped:
    print(f"  skipped: {text} -- {why}")
if rc != "0" and not failed:
    print(f"  critest exited {rc} with no failed spec: see its log")
    sys.exit(1)
sys.exit(1 if failed else 0)
