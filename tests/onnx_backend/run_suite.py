"""Run ONNX's backend test suite against ipuxl and write ``docs/onnx_support.md``.

    python tests/onnx_backend/run_suite.py                 # everything, 2 worker processes
    python tests/onnx_backend/run_suite.py -k conv -v      # a subset, with the failures

The suite is the one the installed ``onnx`` generates (``onnx.backend.test.BackendTest``
over :mod:`ipuxl.onnx.backend`): node tests, simple models, PyTorch-converted models,
PyTorch operators and the bundled "real" models. The exit status is 1 unless at least 90 %
of the node tests and every real model pass (the gate of ``make test-onnx``). Only a
full run (no ``-k``) rewrites the support document.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "onnx_support.md"
NODE_GATE = 0.90
CATEGORIES = {
    "OnnxBackendNodeModelTest": "node",
    "OnnxBackendSimpleModelTest": "simple",
    "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
    "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator",
    "OnnxBackendRealModelTest": "real",
}


def _tests(pattern: str | None) -> list[unittest.TestCase]:
    warnings.simplefilter("ignore")
    import onnx.backend.test

    import ipuxl.onnx.backend as backend

    suite = onnx.backend.test.BackendTest(backend, "ipuxl")
    loader = unittest.TestLoader()
    found = []
    for name, case in sorted(suite.test_cases.items()):
        if name not in CATEGORIES:
            continue
        for test in loader.loadTestsFromTestCase(case):
            method = test.id().split(".")[-1]
            if not method.endswith("_cpu"):
                continue
            if pattern and not re.search(pattern, method):
                continue
            found.append(test)
    return found




def _run_worker(pattern: str | None, shard: int, shards: int, out: str) -> None:
    results = {}
    for index, test in enumerate(_tests(pattern)):
        if index % shards != shard:
            continue
        method = test.id().split(".")[-1][: -len("_cpu")]
        category = CATEGORIES[test.id().split(".")[-2]]
        start = time.perf_counter()
        outcome = unittest.TestResult()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            test.run(outcome)
        status, reason = "pass", ""
        if outcome.skipped:
            status, reason = "skip", outcome.skipped[0][1]
        elif outcome.errors or outcome.failures:
            status = "fail"
            _, trace = (outcome.errors or outcome.failures)[0]
            reason = _reason_from_trace(trace)
        results[method] = {"category": category, "status": status, "reason": reason,
                           "seconds": round(time.perf_counter() - start, 3)}
    Path(out).write_text(json.dumps(results))


def _reason_from_trace(trace: str) -> str:
    lines = [line for line in trace.strip().splitlines() if line.strip()]
    # The exception line is the last line that does not start with whitespace.
    tail = [i for i, line in enumerate(lines) if not line.startswith(" ")]
    start = tail[-1] if tail else len(lines) - 1
    while start > 0 and lines[start - 1].startswith(" ") is False and "Error" not in lines[start]:
        start -= 1
    message = "\n".join(lines[start:])
    if "node(s) ipuxl cannot import" in trace:
        ops = sorted(set(re.findall(r"operator ([\w.]+) \(opset", trace)))
        attrs = sorted(set(re.findall(r"\((\w+)\): attribute\(s\) ([\w, ]+) not", trace)))
        parts = [f"unsupported operator {o}" for o in ops]
        parts += [f"{op}: unsupported attribute {a}" for op, a in attrs]
        return "; ".join(parts)
    if "Not equal to tolerance" in trace or "Mismatched elements" in trace:
        return "wrong values (outside the test's tolerance)"
    first = message.splitlines()[0] if message else "failed"
    return first[:240]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="pattern", help="regex on the test names")
    parser.add_argument("-j", dest="jobs", type=int, default=2, help="worker processes")
    parser.add_argument("-v", dest="verbose", action="store_true", help="list failures")
    parser.add_argument("--worker", nargs=3, metavar=("SHARD", "SHARDS", "OUT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        shard, shards, out = args.worker
        _run_worker(args.pattern, int(shard), int(shards), out)
        return 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        procs, outs = [], []
        for shard in range(args.jobs):
            out = os.path.join(tmp, f"{shard}.json")
            cmd = [sys.executable, __file__, "--worker", str(shard), str(args.jobs), out]
            if args.pattern:
                cmd += ["-k", args.pattern]
            procs.append(subprocess.Popen(cmd))
            outs.append(out)
        codes = [p.wait() for p in procs]
        if any(codes):
            print(f"a worker process failed: exit codes {codes}", file=sys.stderr)
            return 2
        results: dict[str, dict] = {}
        for out in outs:
            results.update(json.loads(Path(out).read_text()))
    elapsed = time.perf_counter() - start
    return _report(results, elapsed, args)


def _report(results: dict[str, dict], elapsed: float, args: argparse.Namespace) -> int:
    by_category: dict[str, Counter] = {}
    for result in results.values():
        by_category.setdefault(result["category"], Counter())[result["status"]] += 1
    print(f"ONNX backend suite: {len(results)} tests in {elapsed:.0f} s")
    for category, counts in sorted(by_category.items()):
        total = sum(counts.values())
        print(f"  {category:18} {counts['pass']:5} / {total:5} pass "
              f"({100 * counts['pass'] / max(total, 1):.1f} %)")
    failed = {n: r for n, r in results.items() if r["status"] != "pass"}
    if args.verbose:
        for name, result in sorted(failed.items()):
            print(f"  FAIL {name}: {result['reason']}")
    node = by_category.get("node", Counter())
    node_rate = node["pass"] / max(sum(node.values()), 1)
    real = by_category.get("real", Counter())
    if not args.pattern:
        _write_doc(results, by_category, elapsed)
        ok = node_rate >= NODE_GATE and real["pass"] == sum(real.values())
        print(f"gate: node tests {100 * node_rate:.1f} % (need {100 * NODE_GATE:.0f} %), "
              f"real models {real['pass']}/{sum(real.values())}: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    return 0


def _write_doc(results: dict[str, dict], by_category: dict[str, Counter],
               elapsed: float) -> None:
    import onnx

    lines = [
        "# ONNX support: the ONNX backend test suite on ipuxl",
        "",
        "Generated by `python tests/onnx_backend/run_suite.py` (run by `make test-onnx`) from",
        f"the suite that onnx {onnx.__version__} generates; do not edit by hand.",
        "",
        "| category | passed | total | rate |",
        "|---|---:|---:|---:|",
    ]
    for category, counts in sorted(by_category.items()):
        total = sum(counts.values())
        lines.append(f"| {category} | {counts['pass']} | {total} | "
                     f"{100 * counts['pass'] / max(total, 1):.1f} % |")
    lines += ["", f"Run time: {elapsed:.0f} s on this machine.", "",
              "## Tests that do not pass, with the reason", "",
              "| test | category | reason |", "|---|---|---|"]
    for name, result in sorted(results.items()):
        if result["status"] != "pass":
            reason = result["reason"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{name}` | {result['category']} | {reason} |")
    DOC.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
