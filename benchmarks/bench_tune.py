"""``lazyops tune`` on a Llama-3-8B decoder layer's trace, and the layer run by the plan it writes.

    python benchmarks/bench_tune.py                                   # on the H200: results/h200/tune.{md,json}
    python benchmarks/bench_tune.py --smoke --device cpu --out /tmp/t # the script's logic: tiny shapes, the host

Four steps, each a command run as a user runs it (the result file lists them, so each reruns alone): (1) the layer's
trace, ``bench_layer.py --build-only`` under ``LAZYOPS_TRACE=tune_trace.jsonl LAZYOPS_TRACE_ARGS=1``; (2) ``lazyops tune
--from-trace tune_trace.jsonl --tokens T --output tune_plan.json``, ``T`` the layer's workloads' token counts, its
wall time measured (goal: at most 120 s); (3) the same into ``tune_plan_2.json``: tuning reproduces when both runs
choose the same backend wherever the candidates differ by more than the noise between the runs (the 90th percentile
of how much a candidate's time changed); (4) ``bench_layer.py --plan tune_plan.json --name tune_layer``: the layer of
lazyops' namespace by the plan, interleaved with each backend's layer (goal: at least as fast as the best
single-backend layer at every workload, and 1.03x at one or more; eager against eager, compiled against compiled).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench_harness as harness
import bench_layer as layer

TITLE = "lazyops tune on a Llama-3-8B decoder layer, and the layer by its plan"
#: The issue's goals: tuning a layer's trace within this many seconds; the plan's layer against the best single
#: backend's: never slower, and this much faster at one workload or more.
TUNE_SECONDS, AT_LEAST, SOMEWHERE = 120, 1.0, 1.03


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__)
    parser.add_argument("--workloads", help=f"the layer's workloads (default {layer.WORKLOADS})")
    parser.add_argument("--rounds", type=int, help="lazyops tune's interleaved rounds (default 5; --smoke: 1)")
    parser.add_argument("--fp8", help="bench_layer.py --fp8: the fp8 layers' kernels traced, tuned and timed too")
    options = parser.parse_args(argv)
    device = harness.start(options)
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    workloads = options.workloads or (layer.SMOKE_WORKLOADS if options.smoke else layer.WORKLOADS)
    tokens = sorted({int(text.partition("-")[2]) for text in workloads.split(",")})
    common = [*(["--smoke"] if options.smoke else []), "--device", device]
    # the smoke run tunes Triton in its interpreter too, but times only the torch backend's layer beside the plan's
    backends = options.backend or ("torch,triton" if options.smoke else None)
    layer_backends = options.backend or ("torch" if options.smoke else None)
    chosen = ["--backend", layer_backends] if layer_backends else []
    trace, plans = out / "tune_trace.jsonl", [out / "tune_plan.json", out / "tune_plan_2.json"]
    steps: list[dict[str, Any]] = []

    def finish() -> Path:
        """The result files as the steps so far left them: a run cut short keeps what it measured."""
        rows, planned = layer_rows(out / "tune_layer.json")
        env = harness.environment(device) | {
            "steps": [{key: value for key, value in step.items() if key != "stdout"} for step in steps],
            "tokens": tokens,
            "workloads": workloads,
            "plan_resolved": planned,
        }
        first, second = [*runs, None, None][:2]
        records = [*choices(first), *differences(first, second), *comparisons(rows)]
        return harness.write(out, "tune", TITLE, env, records, render(env, runs, records))

    for stale in (trace, out / "tune_layer.json", out / "tune_layer.md"):
        stale.unlink(missing_ok=True)  # the trace appends, and a layer run that fails must not leave the last one's
    traced = {"LAZYOPS_TRACE": str(trace), "LAZYOPS_TRACE_ARGS": "1"}
    runs: list[dict[str, Any] | None] = []
    layer_py = [
        sys.executable,
        str(Path(__file__).resolve().parent / "bench_layer.py"),
        *common,
        "--workloads",
        workloads,
        *(["--fp8", options.fp8] if options.fp8 else []),
    ]
    steps.append(run("trace", [*layer_py, "--build-only"], traced))
    tune_command = ["--from-trace", str(trace), "--tokens", ",".join(map(str, tokens))]
    tune_command += ["--rounds", str(options.rounds or (1 if options.smoke else 5))]
    tune_command += ["--backends", backends] if backends else []
    for index, plan in enumerate(plans, 1):
        step = run(f"tune {index}", ["lazyops", "tune", *tune_command, "--output", str(plan), "--json"])
        steps.append(step)
        runs.append(report_of(step.pop("stdout")) if step["status"] in (0, 1) else None)
        finish()
    steps.append(run("layer", [*layer_py, *chosen, "--plan", str(plans[0]), "--out", str(out), "--name", "tune_layer"]))
    written = finish()
    print(f"wrote {written} and its .json")
    return 0 if all(step["status"] in (0, 1) for step in steps) else 1


def run(name: str, command: list[str], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``command`` (``lazyops ...`` as ``python -m lazyops ...``), its wall time measured; the step's record:
    the command as a user types it, its exit status, seconds, and its stdout (``--json``'s report)."""
    shown = " ".join(f"{k}={shlex.quote(_typed(v))}" for k, v in (extra_env or {}).items())
    typed = ["python" if part == sys.executable else _typed(part) for part in command]
    if command[0] == "lazyops":
        command = [sys.executable, "-m", "lazyops", *command[1:]]
    started = time.perf_counter()
    environment = {**os.environ, **(extra_env or {})}
    result = subprocess.run(command, check=False, env=environment, capture_output=True, text=True, cwd=harness.ROOT)
    seconds = time.perf_counter() - started
    print(f"{name}: exit {result.returncode} in {seconds:.1f} s", flush=True)
    if result.returncode not in (0, 1):
        print(result.stdout[-3000:] + result.stderr[-3000:], file=sys.stderr)
    failed = result.stderr[-2000:] if result.returncode not in (0, 1) else None
    record = {"step": name, "command": " ".join(filter(None, [shown, shlex.join(typed)])), "status": result.returncode}
    return record | {"seconds": round(seconds, 1), "stdout": result.stdout, "stderr_tail": failed}


def _typed(part: str) -> str:
    """A path inside the checkout as typed in its root (the commands run there); anything else as it is."""
    path = Path(part)
    if path.is_absolute() and path.resolve().is_relative_to(harness.ROOT):
        return str(path.resolve().relative_to(harness.ROOT))
    return part


# -- what the runs say -------------------------------------------------------------------------------------------


def chosen_text(config: dict[str, Any]) -> str:
    switch = config.get("switch")
    if config.get("choice") is None:
        return "not tuned"
    return config["choice"] if not switch else f"{switch['backend']} < {switch['below']} <= {config['choice']}"


def choices(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One record per configuration of the first run: its choice, its gain over the default at each token count."""
    configurations = report["configurations"] if report else []
    return [{"kind": "choice", **config, "plan": chosen_text(config)} for config in configurations]


def drift(first: dict[str, Any] | None, second: dict[str, Any] | None) -> float | None:
    """The noise between two runs of ``lazyops tune``: the 90th percentile, over every configuration and candidate
    timed in both, of the relative change of its total time from one run to the other (None: nothing to compare)."""
    if first is None or second is None:
        return None
    theirs = {config["label"]: config["us"] for config in second["configurations"]}
    changes = []
    for config in first["configurations"]:
        for backend, figures in config["us"].items():
            again = theirs.get(config["label"], {}).get(backend)
            if again and sum(figures.values()) > 0:
                changes.append(abs(sum(again.values()) / sum(figures.values()) - 1))
    return sorted(changes)[min(len(changes) - 1, int(0.9 * len(changes)))] if changes else None


def differences(first: dict[str, Any] | None, second: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each configuration whose choice differs between two runs of ``lazyops tune``, with the two backends' gap in
    each run (the slower's total over the faster's, minus one). Against the noise between the runs (:func:`drift`):
    a choice that differs although the gap is larger than the noise in both runs is a failure of reproducibility;
    within the noise, either choice is as good as the other as far as this machine can tell."""
    noise = drift(first, second)
    if first is None or second is None or noise is None:
        return []
    theirs = {config["label"]: config for config in second["configurations"]}
    found = []
    for mine in first["configurations"]:
        other = theirs.get(mine["label"])
        if other is None or chosen_text(mine) == chosen_text(other):
            continue
        involved = sorted({mine["choice"], other["choice"]} - {None})
        gaps = [_gap(config, involved) for config in (mine, other)]
        beyond = all(gap is not None and gap > noise for gap in gaps)
        verdict = "differs beyond the noise" if beyond else "within the noise between the runs"
        record = {"kind": "differs", "label": mine["label"], "first": chosen_text(mine), "second": chosen_text(other)}
        found.append(record | {"gap": gaps, "noise": noise, "verdict": verdict})
    return found


def _gap(config: dict[str, Any], backends: list[str]) -> float | None:
    totals = [sum(config["us"].get(backend, {}).values()) for backend in backends]
    if len(totals) != 2 or min(totals) <= 0:
        return None
    return max(totals) / min(totals) - 1


def report_of(stdout: str) -> dict[str, Any] | None:
    """``lazyops tune --json``'s report: the JSON object its stdout ends with (a library may print a line before
    it), or None."""
    start = stdout.find("{") if stdout.startswith("{") else stdout.find("\n{") + 1
    try:
        return json.loads(stdout[start:])  # type: ignore[no-any-return]
    except ValueError:
        return None


def layer_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The timed rows of ``bench_layer.py``'s result, and where its plan layer's kernels resolved (its header)."""
    result = json.loads(path.read_text()) if path.exists() else {"rows": [], "environment": {}}
    rows = [row for row in result["rows"] if row.get("kind") != "bound"]
    return rows, result["environment"].get("plan", {}).get("resolved", [])


def comparisons(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload, eager and compiled: the plan's layer against the fastest single-backend layer (``lazyops
    <backend>``, all its kernels its own), best single over plan: > 1 means the plan's layer is faster."""
    found = []
    for workload in dict.fromkeys(row["workload"] for row in rows):
        for suffix in ("", " + torch.compile"):
            here = {row["impl"]: row for row in rows if row["workload"] == workload and row.get("us")}
            plan = here.get(layer.PLANNED + suffix)
            singles = [  # "lazyops <backend>": all its kernels its own
                row
                for name, row in here.items()
                if row["kind"] == "lazyops"
                and name.endswith(suffix)
                and not name.startswith(layer.PLANNED)
                and len(name.removesuffix(suffix).split()) == 2
            ]
            best = min(singles, key=lambda row: row["us"], default=None)
            record: dict[str, Any] = {"kind": "layer", "workload": workload, "compiled": bool(suffix)}
            if plan is None or best is None:
                found.append(record | {"error": "the plan's layer or every single-backend layer did not run"})
                continue
            record |= {"plan_us": plan["us"], "best_single": best["impl"], "best_us": best["us"]}
            found.append(
                record | {"ratio": best["us"] / plan["us"], "noisy": bool(plan.get("noisy") or best.get("noisy"))}
            )

    return found


def render(env: dict[str, Any], runs: list[Any], records: list[dict[str, Any]]) -> list[str]:
    steps, tokens = env["steps"], [str(m) for m in env["tokens"]]
    lines = [
        f"Token counts tuned: {', '.join(tokens)} (the layer's workloads {env['workloads']}).",
        "",
        "## The commands",
        "",
        *harness.table(
            ["step", "command", "exit", "seconds"],
            [[s["step"], f"`{s['command']}`", s["status"], s["seconds"]] for s in steps],
        ),
        f"## Tuning time (goal: ≤ {TUNE_SECONDS} s for the whole command)",
        "",
    ]
    for step, report in zip([s for s in steps if s["step"].startswith("tune")], runs, strict=False):
        if report is None:
            lines.append(f"- {step['step']}: failed (exit {step['status']})")
            continue
        verdict = "met" if step["seconds"] <= TUNE_SECONDS else "not met"
        checked = f"{report['elapsed_s']:.1f} s checking and timing {len(report['configurations'])} configurations"
        method = f"{report['timing']['method']} timing"
        lines.append(f"- {step['step']}: {step['seconds']} s for the command ({checked}, {method}): {verdict}")
    lines += [
        "",
        "## The plan (first run): choice and speed over the default resolution per token count",
        "",
        *harness.table(
            ["configuration", "default", "plan", *(f"× M={m}" for m in tokens), "rejected / declined"],
            [_choice_cells(r, tokens) for r in records if r["kind"] == "choice"],
        ),
        "## Reproducibility: choices that differ between the two runs",
        "",
    ]
    differing = [r for r in records if r["kind"] == "differs"]
    if not differing:
        lines += ["None: both runs chose the same backend (and switch) for every configuration.", ""]
    else:
        lines += [
            f"Noise between the runs: {100 * differing[0]['noise']:.1f} % (the 90th percentile of the change of a "
            "candidate's total time from run 1 to run 2). Gap: the two backends' totals apart in each run.",
            "",
            *harness.table(
                ["configuration", "run 1", "run 2", "gap run 1 / run 2", "verdict"],
                [[r["label"], r["first"], r["second"], _gaps(r), r["verdict"]] for r in differing],
            ),
        ]
    compared = [r for r in records if r["kind"] == "layer"]
    lines += [
        f"## The layer by the plan (goal: ≥ {AT_LEAST}× the best single-backend layer everywhere, ≥ {SOMEWHERE}× "
        "somewhere)",
        "",
        "Best single over plan: the fastest `lazyops <backend>` layer's µs over the plan's (> 1: the plan is faster); "
        "eager against eager, compiled against compiled. All rows: `tune_layer.md`. Where the plan's layer took each "
        "kernel (`lazyops.which` with the plan in force: the reason is `plan` where the plan decided):",
        "",
        *(f"- {line}" for line in env["plan_resolved"] or ["(the layer did not run)"]),
        "",
        *harness.table(
            ["workload", "", "plan µs", "best single backend", "µs", "best single / plan"],
            [[r["workload"], "compiled" if r["compiled"] else "eager", *_layer_cells(r)] for r in compared],
        ),
    ]
    ratios = [r["ratio"] for r in compared if "ratio" in r]
    if ratios:
        everywhere, somewhere = all(x >= AT_LEAST for x in ratios), any(x >= SOMEWHERE for x in ratios)
        lines.append(
            f"Goal: {'met' if everywhere and somewhere else 'not met'} (≥ {AT_LEAST}× at every workload: "
            f"{'yes' if everywhere else 'no'}; ≥ {SOMEWHERE}× at one or more: {'yes' if somewhere else 'no'})."
        )
    return lines


def _choice_cells(record: dict[str, Any], tokens: list[str]) -> list[str]:
    refused = {**(record["rejected"] or {}), **(record["declined"] or {})}
    gains = [harness.figure(record["gain"].get(m), 2) for m in tokens]
    return [
        record["label"],
        record["default"],
        record["plan"],
        *gains,
        "; ".join(f"{b}: {w}" for b, w in refused.items()),
    ]


def _gaps(record: dict[str, Any]) -> str:
    return " / ".join("—" if gap is None else f"{100 * gap:.1f} %" for gap in record["gap"])


def _layer_cells(record: dict[str, Any]) -> list[str]:
    if "error" in record:
        return [record["error"], "", "", ""]
    figures = [(record["plan_us"], 1), (record["best_us"], 1), (record["ratio"], 3)]
    plan, best, ratio = (harness.figure(value, digits, record["noisy"]) for value, digits in figures)
    return [plan, record["best_single"], best, ratio]


if __name__ == "__main__":
    sys.exit(main())
