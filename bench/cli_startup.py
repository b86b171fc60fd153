"""Start-up time of the ``hermes-state`` command: ``--help`` against the bare interpreter.

Each round runs every contender once, in turn, as a fresh process (so all of
them see the same machine load), and the table gives the median and 90th
percentile wall time per contender, each median's ratio to the bare
interpreter's (``python -c pass``, the floor no command can go below), and
the median CPU time (user + system), which moves less with the load of a
shared machine than the wall time:

  - ``python -c pass``: the interpreter alone (baseline);
  - ``import hermes_state.store``: the store with its imports (msgspec, PyYAML,
    the SQLite backend), which every command loaded at start-up before they
    were deferred;
  - ``python -m hermes_state --help`` and ``... export --help``: the command's help;
  - ``hermes-state --help``: the installed console script, when it is on PATH
    beside this interpreter;
  - with ``--before DIR`` (a checkout of an older revision, e.g. from
    ``git archive``), that revision's ``python -m hermes_state --help`` too.

Target (issue 23): ``--help`` median under 150 ms. Run from the repository root::

    python3 bench/cli_startup.py                # 30 rounds
    python3 bench/cli_startup.py --rounds 10 --check
    git archive d3337e0 | tar -x -C /tmp/before && python3 bench/cli_startup.py --before /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
LIMIT_MS = 150.0


def contenders(before: str | None) -> dict[str, tuple[list[str], str]]:
    """Name -> (argv, PYTHONPATH first entry)."""
    python = sys.executable
    here = str(_REPO)
    found = {
        "python -c pass (baseline)": ([python, "-c", "pass"], here),
        "import hermes_state.store": ([python, "-c", "import hermes_state.store"], here),
        "python -m hermes_state --help": ([python, "-m", "hermes_state", "--help"], here),
        "python -m hermes_state export --help": ([python, "-m", "hermes_state", "export", "--help"], here),
    }
    script = Path(python).parent / "hermes-state"
    if script.exists():
        found["hermes-state --help"] = ([str(script), "--help"], here)
    if before is not None:
        found["before: python -m hermes_state --help"] = ([python, "-m", "hermes_state", "--help"], before)
    return found


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(argv: list[str], path: str) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run; CPU time (user + system) moves less with the machine's load."""
    env = dict(os.environ)
    env["PYTHONPATH"] = path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cpu = _children_cpu()
    started = time.perf_counter()
    # The working directory comes first on sys.path for -c and -m: it must be the tree being timed.
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=path)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed, (_children_cpu() - cpu) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--check", action="store_true", help=f"exit 1 when --help's median is over {LIMIT_MS:.0f} ms")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    parser.add_argument("--before", metavar="DIR", help="also time --help of the revision checked out in DIR")
    args = parser.parse_args()
    runs = contenders(args.before)
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for argv, path in runs.values():  # warm the file and bytecode caches once
        run_once(argv, path)
    for _ in range(args.rounds):
        for name, (argv, path) in runs.items():
            wall, used = run_once(argv, path)
            times[name].append(wall)
            cpu[name].append(used)
    load = os.getloadavg()[0]
    baseline = statistics.median(times["python -c pass (baseline)"])
    print(f"{args.rounds} rounds, load average {load:.2f}, {sys.version.split()[0]}")
    print(f"{'contender':<46} {'median ms':>10} {'p90 ms':>8} {'x baseline':>11} {'CPU ms':>8}")
    figures = {}
    for name, values in times.items():
        median = statistics.median(values)
        p90 = sorted(values)[max(0, int(len(values) * 0.9) - 1)]
        used = statistics.median(cpu[name])
        figures[name] = {"median_ms": round(median, 1), "p90_ms": round(p90, 1), "ratio": round(median / baseline, 2),
                         "cpu_ms": round(used, 1)}
        print(f"{name:<46} {median:>10.1f} {p90:>8.1f} {median / baseline:>11.2f} {used:>8.1f}")
    help_median = figures["python -m hermes_state --help"]["median_ms"]
    verdict = "ok" if help_median <= LIMIT_MS else "OVER"
    print(f"--help median {help_median:.1f} ms, limit {LIMIT_MS:.0f} ms: {verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.rounds, "load": load, "limit_ms": LIMIT_MS,
                                               "figures": figures}, indent=2))
    return 1 if args.check and verdict != "ok" else 0


if __name__ == "__main__":
    raise SystemExit(main())
