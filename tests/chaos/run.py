"""`make chaos`: run chaos seeds and print each one's steps and violations.

    python tests/chaos/run.py --seed 7                 # one seed, exactly its step list again
    python tests/chaos/run.py --seeds 20 --first 100   # seeds 100..119
    python tests/chaos/run.py --seeds 5 --kinds all    # also the kinds excluded from `make test`
    python tests/chaos/run.py --seed 1 --kinds rename_read --first-kind rename_read   # one excluded kind at work
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import run_scenario  # noqa: E402
from scenario import ALL_KINDS, ENABLED_KINDS, EXCLUDED_KINDS, generate  # noqa: E402


def parse_kinds(text: str | None) -> tuple[str, ...]:
    if not text:
        return ENABLED_KINDS
    if text == "all":
        return ALL_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown:
        raise SystemExit(f"--kinds: unknown kind(s) {', '.join(unknown)}; known: {', '.join(ALL_KINDS)}")
    return tuple(dict.fromkeys(("deliver", "run") + kinds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds (from --first)")
    parser.add_argument("--first", type=int, default=1, help="first seed of --seeds")
    parser.add_argument("--kinds", help="comma-separated step kinds, or 'all' (default: the enabled kinds); "
                                        f"excluded from make test: {', '.join(EXCLUDED_KINDS)}")
    parser.add_argument("--first-kind", choices=ALL_KINDS, help="make the first step after the deliveries this kind")
    parser.add_argument("--max-runs", type=int, default=3, help="driver-starting steps per scenario")
    parser.add_argument("--dir", help="where scenario folders go (default: a new temp folder)")
    args = parser.parse_args(argv)
    kinds = parse_kinds(args.kinds)
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    root = Path(args.dir or tempfile.mkdtemp(prefix="conduit-chaos-")).resolve()
    print(f"chaos: {len(seeds)} seed(s), kinds {', '.join(kinds)}; folders under {root}", flush=True)
    clean, violated, started = 0, [], time.monotonic()
    for seed in seeds:
        rerun = f"make chaos SEED={seed}" if kinds == ENABLED_KINDS and args.max_runs == 3 and not args.first_kind else (
            f"python tests/chaos/run.py --seed {seed} --kinds {','.join(kinds)} --max-runs {args.max_runs}"
            + (f" --first-kind {args.first_kind}" if args.first_kind else ""))
        outcome = run_scenario(generate(seed, kinds, args.max_runs, args.first_kind), root, rerun)
        print(outcome.describe(), flush=True)
        if outcome.clean:
            clean += 1
        else:
            violated.append(seed)
    print(f"chaos: {clean} of {len(seeds)} seed(s) clean in {time.monotonic() - started:.0f} s"
          + (f"; violated: {' '.join(map(str, violated))}" if violated else ""), flush=True)
    return 1 if violated else 0


if __name__ == "__main__":
    sys.exit(main())
