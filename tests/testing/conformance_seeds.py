"""The flake rate of a conformance run: ``run_conformance("torch", kernels=[kernel], seed=s)`` for many seeds.

The torch backend is correct by definition (its specs' references are the yardstick), so every failure here is a
false one: the judge refusing a right answer. ``python tests/testing/conformance_seeds.py --seeds 100`` prints,
per kernel, the seeds run and those that failed; ``test_tolerances.py`` runs it under the exhaustive profile.
"""

from __future__ import annotations

from lazyops import testing
from lazyops.specs import kernel_names


def failing_seeds(kernel: str, seeds: range, max_examples: int = 25) -> dict[int, str]:
    """``{seed: the report}`` for each seed whose conformance run of the torch backend's ``kernel`` failed."""
    failed = {}
    for seed in seeds:
        try:
            testing.run_conformance("torch", kernels=[kernel], seed=seed, max_examples=max_examples, device="cpu")
        except testing.ConformanceError as failure:
            failed[seed] = str(failure)
    return failed


def main() -> None:
    import argparse
    import time

    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="seeds 0 .. N-1 per kernel (default 100)")
    parser.add_argument("--kernels", default=",".join(kernel_names()), help="comma-separated kernel names")
    arguments = parser.parse_args()
    total = failures = 0
    for kernel in arguments.kernels.split(","):
        start = time.perf_counter()
        failed = failing_seeds(kernel, range(arguments.seeds))
        total += arguments.seeds
        failures += len(failed)
        print(f"{kernel:18} {arguments.seeds} seeds, {len(failed)} failed ({time.perf_counter() - start:.0f} s)")
        for seed, report in failed.items():
            print(f"  seed {seed}: {report.splitlines()[1].strip()}")
    print(f"all kernels: {total} runs, {failures} failed")


if __name__ == "__main__":
    main()
