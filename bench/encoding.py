"""What the call-site value checks cost per message, against the serialisation they guard.

Every append encodes its message in the caller's task (``encode_message_dicts``):
content, tool calls and sidecars become column values, and structured values
are first checked against the limits of ``hermes_state.limits`` (64-bit ints,
finite floats, str keys, depth 100). This measures, on the same messages in
the same run:

  baseline   ``json.dumps`` of every structured value (the serialisation any
             encoder has to do; what the reference did, unchecked)
  checks     ``check_json_value`` alone on the same structured values
  store      ``encode_message_dicts`` (checks + serialisation + row building)

for three shapes: plain text turns, assistant turns with three tool calls,
and multimodal user turns (text plus an inline image). It prints the time
per message, and the ratios checks/baseline and store/baseline; ``--check``
fails (exit 1) when checks/baseline exceeds ``--limit`` (default 1: checking
a value may cost at most one more serialisation of it).

Run from the repository root::

    python3 bench/encoding.py
    python3 bench/encoding.py --messages 2000 --repeat 7 --check
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from hermes_state.encoding import encode_message_dicts  # noqa: E402
from hermes_state.limits import check_json_value  # noqa: E402


def _text(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"turn {i}: please check the deployment logs for errors " * 4}


def _tools(i: int) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}_{k}", "type": "function",
         "function": {"name": "terminal", "arguments": json.dumps({"command": f"ls -la /srv/{k}", "timeout": 30})}}
        for k in range(3)
    ]
    return {"role": "assistant", "content": "running three commands", "tool_calls": calls, "token_count": 120}


def _multimodal(i: int) -> dict[str, Any]:
    parts = [{"type": "text", "text": f"what is in picture {i}?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 400}}]
    return {"role": "user", "content": parts}


SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {"text": _text, "tool calls": _tools, "multimodal": _multimodal}


def _structured(messages: list[dict[str, Any]]) -> list[Any]:
    values = (message.get(key) for message in messages for key in ("content", "tool_calls"))
    return [v for v in values if v is not None and not isinstance(v, str)]


def _baseline(values: list[Any]) -> None:
    for value in values:
        json.dumps(value)


def _checks(values: list[Any]) -> None:
    for value in values:
        check_json_value(value, "content")


def _median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000, help="messages per shape (default 5000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement; the median is reported")
    parser.add_argument("--limit", type=float, default=1.0, help="largest acceptable checks/baseline ratio")
    parser.add_argument("--check", action="store_true", help="exit 1 when a ratio exceeds --limit")
    args = parser.parse_args()

    failed = False
    print(f"us per message; limit checks/baseline <= {args.limit:g}")
    print(f"{'shape':<12} {'baseline':>9} {'checks':>8} {'store':>8} {'checks/base':>12} {'store/base':>11}")
    for name, make in SHAPES.items():
        messages = [make(i) for i in range(args.messages)]
        values = _structured(messages)
        base = _median_seconds(lambda: _baseline(values), args.repeat)
        checks = _median_seconds(lambda: _checks(values), args.repeat)
        store = _median_seconds(lambda: encode_message_dicts(messages), args.repeat)
        per = 1e6 / args.messages
        if not values:  # plain text: nothing structured to check or serialise
            print(f"{name:<12} {'-':>9} {'-':>8} {store * per:>8.2f} {'-':>12} {'-':>11}")
            continue
        ratio = checks / base
        failed |= ratio > args.limit
        print(f"{name:<12} {base * per:>9.2f} {checks * per:>8.2f} {store * per:>8.2f} {ratio:>12.2f} {store / base:>11.2f}")
    if args.check and failed:
        print("FAIL: a ratio exceeds the limit")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
