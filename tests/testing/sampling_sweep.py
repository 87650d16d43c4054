"""The false-failure rate of the sampler judge (``lazyops.testing._draws``): drawn cases run on the torch backend,
a correct sampler, counting the cases the judge refuses. ``--wrong`` runs a sampler that ignores top-p instead,
to show that the judge refuses it.

    OMP_NUM_THREADS=1 .venv/bin/python tests/testing/sampling_sweep.py --cases 300
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from hypothesis import HealthCheck, given, seed, settings

from lazyops._backends.torch.sample import sample_tl
from lazyops.specs import spec
from lazyops.testing import _draws
from lazyops.testing._compare import ConformanceError
from lazyops.testing._draws import judge_draws
from lazyops.testing.cases import examples

#: The normal quantile of each level the sweep can run at.
QUANTILES = {1e-4: 3.719, 1e-3: 3.090, 1e-2: 2.326}


def wrong_sampler(vocab: int, dtype: Any, **options: Any) -> Any:
    kernel = sample_tl(vocab, dtype, **options)
    return lambda logits, t, k, p, *rest, **kw: kernel(logits, t, k, p.clone().fill_(1.0), *rest, **kw)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wrong", action="store_true")
    parser.add_argument("--level", type=float, default=1e-4, choices=sorted(QUANTILES))
    args = parser.parse_args()
    _draws.Z_ALPHA = QUANTILES[args.level]
    factory = wrong_sampler if args.wrong else sample_tl
    failures, runs = [], [0]

    @settings(max_examples=args.cases, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @seed(args.seed)
    @given(examples(spec("sample_tl")).cases())
    def sweep(case: Any) -> None:
        runs[0] += 1
        try:
            judge_draws(factory, case, device="cpu")
        except ConformanceError as error:
            failures.append(str(error)[:200])

    start = time.perf_counter()
    sweep()
    elapsed = time.perf_counter() - start
    print(f"{runs[0]} cases (seed {args.seed}, level {args.level}), {len(failures)} refused, {elapsed:.0f} s")
    for line in failures[:10]:
        print(" ", line)


if __name__ == "__main__":
    main()
