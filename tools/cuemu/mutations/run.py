#!/usr/bin/env python3
"""Mutation check of the GPU suites on cuemu (docs/design/gpu-verification.md).

For each mutation in mutations.json: apply it to the source tree, rebuild the GPU tests in the
given emulation build folder, run them under round-robin and under random schedules (and, with
--asan-build, under ASan+UBSan), record whether the suite caught it and how, then restore the
file. Prints a markdown table. Usage (from the repository root):
  tools/cuemu/mutations/run.py build/emu [--asan-build build/emu-asan] [--only NAME] [--seeds 1,2]
                               [--timeout SECONDS]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env=None, timeout=900):
    try:
        p = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + "\n(timeout)"


def verdict(rc, out):
    """How a run ended: 'pass' (mutation missed), or a short description of the catch."""
    if rc == 0:
        return "pass"
    for line in out.splitlines():
        if line.startswith("cuemu: "):
            text = line[len("cuemu: "):]
            for key in ("exited while", "divergent", "does not name", "deadlock", "not in the mask",
                        "already exited", "misaligned"):
                if key in text:
                    return "cuemu: " + key
            return "cuemu: " + text[:60]
        if "ERROR: AddressSanitizer" in line:
            return "ASan: " + line.split("AddressSanitizer: ")[-1].split(" ")[0]
        if "runtime error" in line:
            return "UBSan"
    failed = [l for l in out.splitlines() if l.startswith("[  FAILED  ] ") and "." in l]
    if failed:
        return f"{len(failed)} tests fail"
    return "timeout" if rc == 124 else f"exit {rc}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--asan-build")
    ap.add_argument("--only")
    ap.add_argument("--seeds", default="11")
    ap.add_argument("--filter", help="gtest filter (default: each mutation's own)")
    ap.add_argument("--timeout", type=int, default=900,
                    help="seconds before a test run counts as a hang (default 900)")
    args = ap.parse_args()
    muts = json.load(open(os.path.join(HERE, "mutations.json")))
    rows = []
    for m in muts:
        if args.only and m["name"] != args.only:
            continue
        original = open(m["file"]).read()
        if m["find"] not in original:
            rows.append((m["name"], m["what"], "not applicable (source changed)", "", ""))
            continue
        try:
            open(m["file"], "w").write(original.replace(m["find"], m["replace"], 1))
            results = []
            builds = [(args.build, {})]
            if args.asan_build:
                builds.append((args.asan_build, {"ASAN_OPTIONS": "abort_on_error=1:detect_leaks=0"}))
            for build, extra in builds:
                rc, out = run(["cmake", "--build", build, "--target", "prefixhit_gpu_tests"])
                if rc != 0:
                    results.append("does not compile")
                    continue
                exe = os.path.join(build, "tests", "prefixhit_gpu_tests")
                base = dict(os.environ, PREFIXHIT_VECTORS=os.path.abspath("tests/data/conformance"), **extra)
                schedules = [("rr", {})] if extra else [("rr", {})] + [
                    (f"random:{s}", {"CUEMU_SCHEDULE": f"random:{s}", "CUEMU_PREEMPT": "0.3",
                                     "CUEMU_RESIDENT_BLOCKS": "4"}) for s in args.seeds.split(",")]
                for label, env in schedules:
                    rc, out = run([exe, "--gtest_brief=1", f"--gtest_filter={args.filter or m['filter']}"],
                                  env=dict(base, **env), timeout=args.timeout)
                    tag = "asan " if extra else ""
                    results.append(f"{tag}{label}: {verdict(rc, out)}")
        finally:
            open(m["file"], "w").write(original)
        rows.append((m["name"], m["what"], "; ".join(results)))
        print(f"| {rows[-1][0]} | {rows[-1][1]} | {rows[-1][2]} |", flush=True)
    # Restore the unmutated objects.
    for build in [args.build] + ([args.asan_build] if args.asan_build else []):
        run(["cmake", "--build", build, "--target", "prefixhit_gpu_tests"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
