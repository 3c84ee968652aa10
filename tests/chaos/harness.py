"""Runs a chaos scenario against the real product: `airflow-conduit run` and `dlq replay` as processes,
real `kill -9` of the driver JVM, the Python driver and the CLI, --faults crash points, file operations.

Every step that starts a driver has a deadline: a run still going past it is killed (its whole process tree,
found by its state dir) and reported as a violation. After the steps, one clean run lets the pipeline finish,
then the invariant checker (invariants.py) reads the raw inputs and outputs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from invariants import Delivered, Ledger, check  # noqa: E402
from scenario import Scenario, Step, file_lines  # noqa: E402

BIN = Path(sys.executable).parent
CLI = str(BIN / "airflow-conduit")
RUN_DEADLINE_S = 240.0      # a run of this size takes 10-40 s; past this it waits without end
DRIVER_GONE_DEADLINE_S = 240.0
KILL_TARGETS = {"kill_jvm": "jvm", "kill_python": "python", "kill_cli": "cli"}

SPEC = """version: "1"
pipeline:
  id: {pipeline_id}
  mode: available-now
  sources:
    - id: in
      plugin: builtin:file
      settings:
        path: {input}
        format: json
        schema: "id INT NOT NULL, amount DOUBLE, note STRING"
        max-files-per-trigger: 1
  processors:
    - id: keep
      plugin: filter
      settings:
        condition: "amount >= {min_amount}"
{expect}  destinations:
    - id: lake
      plugin: builtin:file
      settings:
        path: out/lake
        format: parquet
  dead-letter-queue:
    plugin: builtin:file
    settings:
      path: out/dlq
      format: json
    window-size: 0
    window-nack-threshold: 0
    include-messages: true
"""
EXPECT = """    - id: quality
      plugin: expect
      settings:
        rules:
          - {{name: cap, condition: "amount <= {max_amount}", action: drop}}
"""


@dataclass
class Outcome:
    seed: int
    scenario: Scenario
    folder: Path
    violations: list[str] = field(default_factory=list)
    named_error: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rerun: str = ""             # the command that runs this scenario again

    @property
    def clean(self) -> bool:
        return not self.violations

    def describe(self) -> str:
        head = "CLEAN" if self.clean else "VIOLATED"
        lines = [f"{head} seed {self.seed} in {self.seconds:.0f} s ({self.folder})", self.scenario.describe()]
        lines += [f"  note: {n}" for n in self.notes]
        if self.named_error:
            lines.append(f"  named error: {self.named_error}")
        lines += [f"  VIOLATION: {v}" for v in self.violations[:30]]
        if len(self.violations) > 30:
            lines.append(f"  ... and {len(self.violations) - 30} more")
        if not self.clean and self.rerun:
            lines.append(f"  rerun: {self.rerun}")
        return "\n".join(lines)


def processes_of(state_dir: Path) -> dict[str, list[int]]:
    """The processes working on `state_dir` by role, found in /proc by their command lines."""
    roles: dict[str, list[int]] = {"jvm": [], "python": [], "detached": []}
    needle = str(state_dir)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if not words or not any(w == needle or w.startswith(needle + os.sep) for w in words):
            continue
        if "airflow_conduit.hooks.backends.detached" in words:  # first: its command line holds the driver's
            roles["detached"].append(int(entry.name))
        elif words[0].endswith("java"):
            roles["jvm"].append(int(entry.name))
        elif any(w.endswith("entrypoint.py") for w in words):
            roles["python"].append(int(entry.name))
    return roles


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def marker_count(state_dir: Path) -> int:
    commits = state_dir / "commits"
    return sum(1 for _ in commits.glob("*/*")) if commits.exists() else 0


def next_batch(state_dir: Path) -> int:
    ids = [int(p.name) for p in (state_dir / "commits").glob("*/*") if p.name.lstrip("-").isdigit()]
    return max(ids) + 1 if ids else 0


class Harness:
    def __init__(self, scenario: Scenario, folder: Path):
        self.scenario = scenario
        self.folder = folder
        self.outcome = Outcome(scenario.seed, scenario, folder)
        self.ledger = Ledger()
        self.min_amount = 0
        self.max_amount: int | None = None
        self.pipelines = {"main": ("pipeline.yaml", "in", folder / "state")}
        self.log = None

    # ---- helpers
    def say(self, text: str) -> None:
        self.log.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.log.flush()

    def write_spec(self, which: str = "main") -> Path:
        spec_name, input_dir, _ = self.pipelines[which]
        expect = EXPECT.format(max_amount=self.max_amount) if self.max_amount is not None else ""
        pipeline_id = f"chaos-{self.scenario.seed}" if which == "main" else f"chaos-{self.scenario.seed}-other"
        path = self.folder / spec_name
        path.write_text(SPEC.format(pipeline_id=pipeline_id, input=input_dir, min_amount=self.min_amount, expect=expect))
        self.ledger.filter_thresholds.add(self.min_amount)
        return path

    def deliver(self, name: str, lines: list[str], input_dir: str = "in", cut: int | None = None) -> None:
        """Write the file aside under a hidden name, then rename it into the folder (atomic, as the docs advise).
        `cut`: leave the last line without its end (a file still being written), `cut` characters of it."""
        folder = self.folder / input_dir
        folder.mkdir(parents=True, exist_ok=True)
        offset = 0
        for line in lines:
            self.record(line, name, offset)
            offset += len(line.encode()) + 1
        text = "".join(line + "\n" for line in lines)
        if cut is not None:
            text = text[: len(text) - 1 - len(lines[-1]) + cut]
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text)
        os.rename(tmp, folder / name)

    def record(self, line: str, file: str, offset: int, appended: bool = False) -> None:
        import re

        record_id = int(re.search(r'"id": ?(\d+)', line).group(1))
        try:
            amount = json.loads(line)["amount"]
            amount = amount if isinstance(amount, int) else None
        except ValueError:
            amount = None
        self.ledger.add(Delivered(record_id, line, file, offset, amount, appended))

    def cli(self, args: list[str], step: str, kill: tuple[str, int, float] | None = None,
            state_dir: Path | None = None, accept: tuple[int, ...] = (0,), named: str | None = None,
            meanwhile=None) -> int | None:
        """Run the CLI to its end within the deadline; `kill`: (target, markers, delay) kill -9 once the state dir
        holds that many more commit markers. `named`: the error code an exit 3 must name (else a violation).
        `meanwhile`: called every poll while the CLI runs, and once with `done=True` after it ended.
        Returns the exit code (None: past the deadline, killed)."""
        state_dir = state_dir or self.pipelines["main"][2]
        base = marker_count(state_dir)
        self.step_output_from = (self.folder / "cli.log").stat().st_size if (self.folder / "cli.log").exists() else 0
        out = open(self.folder / "cli.log", "a")
        out.write(f"\n===== {step}: {' '.join(args)}\n")
        out.flush()
        started = time.monotonic()
        proc = subprocess.Popen([CLI, *args], stdout=out, stderr=subprocess.STDOUT, cwd=self.folder,
                                start_new_session=True)
        killed = False
        while proc.poll() is None:
            if time.monotonic() - started > RUN_DEADLINE_S:
                self.kill_everything(proc, state_dir)
                self.outcome.violations.append(f"deadline: step {step} still running after {RUN_DEADLINE_S:.0f} s "
                                               f"(killed; markers {marker_count(state_dir) - base} new)")
                out.close()
                return None
            if kill and not killed and marker_count(state_dir) - base >= kill[1]:
                time.sleep(kill[2])
                target = kill[0]
                pids = [proc.pid] if target == "cli" else processes_of(state_dir)[target]
                if pids and proc.poll() is None:
                    for pid in pids:
                        _kill(pid)
                    self.say(f"kill -9 {target} {pids} at {marker_count(state_dir) - base} new markers")
                    killed = True
                    if target == "cli":
                        proc.wait()
                        break
            if meanwhile:
                meanwhile(done=False)
            time.sleep(0.1)
        code = proc.wait()
        out.close()
        if meanwhile:
            meanwhile(done=True)
        if kill and not killed:
            self.outcome.notes.append(f"{step}: the run ended before the kill point")
        if kill and kill[0] == "cli" and killed:
            self.wait_driver_gone(state_dir, step)
            return code
        self.say(f"{step}: exit {code}")
        if code not in accept:
            tail = (self.folder / "cli.log").read_text(errors="replace").splitlines()[-6:]
            self.outcome.violations.append(f"exit {code}: step {step} (expected {accept}): " + " | ".join(tail))
        elif code == 3 and named and not re.search(rf"\bcode {named}\b", self.step_output()):
            tail = self.step_output().splitlines()[-6:]
            self.outcome.violations.append(f"exit 3 without error {named}: step {step}: " + " | ".join(tail))
        return code

    def step_output(self) -> str:
        """What the last CLI printed (its part of cli.log)."""
        with open(self.folder / "cli.log", "rb") as f:
            f.seek(self.step_output_from)
            return f.read().decode(errors="replace")

    def wait_driver_gone(self, state_dir: Path, step: str) -> None:
        deadline = time.monotonic() + DRIVER_GONE_DEADLINE_S
        while any(processes_of(state_dir).values()):
            if time.monotonic() > deadline:
                self.kill_everything(None, state_dir)
                self.outcome.violations.append(f"deadline: the detached driver of step {step} still running "
                                               f"{DRIVER_GONE_DEADLINE_S:.0f} s after its CLI was killed")
                return
            time.sleep(0.2)

    def kill_everything(self, proc, state_dir: Path) -> None:
        if proc is not None:
            _kill(proc.pid)
        roles = processes_of(state_dir)
        for pid in roles["detached"] + roles["jvm"] + roles["python"]:  # the wrapper first: PDEATHSIG does the rest
            _kill(pid)
        if proc is not None:
            proc.wait()

    def run_args(self, which: str = "main", *extra: str, spec: str | None = None) -> list[str]:
        spec_name, _, state_dir = self.pipelines[which]
        return ["run", spec or spec_name, "--state-dir", str(state_dir), "--min-delay", "1s", "--poll-interval", "0.5",
                *extra]

    def line_finisher(self, file: str):
        """A writer still at work on `file`'s last line: a few more bytes every 2 s while the run goes, the line's
        end once they are all out (or the run ended). Each write changes the file, so the product must wait for it
        to settle rather than read the fragment (docs/sources.md, delivering input files)."""
        rest = self.half[1] + "\n"
        path = self.folder / "in" / file
        state = {"next": time.monotonic() + 2.0}

        def tick(done: bool) -> None:
            nonlocal rest
            if not rest or (not done and time.monotonic() < state["next"]):
                return
            piece, rest = (rest, "") if done or len(rest) <= 3 else (rest[:2], rest[2:])
            with open(path, "a") as f:
                f.write(piece)
            state["next"] = time.monotonic() + 2.0
            if not rest:
                self.say(f"{file}: its last line finished{' after the run' if done else ' during the run'}")
        return tick

    def run_after_crash(self, name: str) -> None:
        """A run under a changed spec after a half-committed batch: refused with 2150 naming the kept spec; then
        the documented way on: the kept spec (copied next to ours) finishes the batch, then the new spec runs."""
        code = self.cli(self.run_args(), name, accept=(0, 3), named="2150")
        if code != 3:
            if code == 0:
                self.outcome.notes.append(f"{name}: no half-committed batch to refuse (the crash point did not fire)")
            return
        kept = re.search(r"kept in (\S+\.yaml)", self.step_output())
        if not kept:
            self.outcome.violations.append(f"{name}: the 2150 refusal names no kept spec")
            return
        shutil.copy(kept.group(1), self.folder / "pipeline-kept.yaml")
        self.say(f"{name}: refused (2150); running the kept spec {kept.group(1)}, then the new spec")
        self.cli(self.run_args(spec="pipeline-kept.yaml"), name + ":kept-spec")
        self.cli(self.run_args(), name + ":new-spec")

    # ---- steps
    def step(self, n: int, step: Step) -> None:
        p, kind, name = step.params, step.kind, f"{n}:{step.kind}"
        self.say(f"step {step.describe()}")
        state_dir = self.pipelines["main"][2]
        if kind == "deliver":
            self.deliver(p["file"], file_lines(self.scenario.seed, p["file_no"], p["count"], p["first_id"]))
        elif kind == "half_written":
            lines = file_lines(self.scenario.seed, p["file_no"], p["count"], p["first_id"])
            lines[-1] = f'{{"id": {p["first_id"] + p["count"] - 1}, "amount": 42, "note": "finished later"}}'
            self.deliver(p["file"], lines, cut=len(lines[-1]) // 2)
            self.half = (p["file"], lines[-1][len(lines[-1]) // 2:])
        elif kind == "run" and p.get("finish_line"):
            self.cli(self.run_args(), name, meanwhile=self.line_finisher(p["finish_line"]))
        elif kind == "run" and p.get("after_crash"):
            self.run_after_crash(name)
        elif kind == "run":
            self.cli(self.run_args(), name)
        elif kind == "crash_point":
            batch = next_batch(state_dir) + p["batch"]
            faults = json.dumps({p["fault"]: {"destination": p["destination"], "batch": batch}})
            if p.get("no_restart"):
                self.cli(self.run_args("main", "--faults", faults, "--max-retries", "0"), name, accept=(0, 3))
            else:
                self.cli(self.run_args("main", "--faults", faults), name)
        elif kind in KILL_TARGETS:
            self.cli(self.run_args(), name, kill=(KILL_TARGETS[kind], p["after_markers"], p["extra_delay_s"]))
        elif kind == "append_read":
            path = self.folder / "in" / p["file"]
            offset = path.stat().st_size
            lines = file_lines(self.scenario.seed, 10_000 + p["first_id"], p["count"], p["first_id"])
            for line in lines:
                self.record(line, p["file"], offset, appended=True)
                offset += len(line.encode()) + 1
            with open(path, "a") as f:
                f.write("".join(line + "\n" for line in lines))
        elif kind == "delete_read":
            (self.folder / "in" / p["file"]).unlink()
        elif kind == "rename_read":
            os.rename(self.folder / "in" / p["file"], self.folder / "in" / p["to"])
        elif kind == "spec_filter":
            self.min_amount = p["min_amount"]
            self.write_spec()
        elif kind == "spec_expect":
            self.max_amount = p["max_amount"]
            self.write_spec()
        elif kind == "replay":
            self.cli(["dlq", "replay", "pipeline.yaml", "--state-dir", str(state_dir)] + (["--force"] if p["force"] else []),
                     name)
        elif kind == "shared_output":
            self.pipelines["other"] = ("other.yaml", "in-other", self.folder / "state-other")
            self.write_spec("other")
            lines = file_lines(self.scenario.seed, 50_000, p["count"], p["first_id"])
            self.deliver("other-001.jsonl", lines, input_dir="in-other")
            # the second comer is refused before it writes (2650): its records have that named error as their fate
            code = self.cli(self.run_args("other"), name, state_dir=self.pipelines["other"][2], accept=(3,),
                            named="2650")
            if code == 3:
                self.ledger.refused_files["other-001.jsonl"] = "OUTPUT_OWNED_ELSEWHERE (2650)"
                unnamed = [f"'{pid}'" for pid in (f"chaos-{self.scenario.seed}", f"chaos-{self.scenario.seed}-other")
                           if f"'{pid}'" not in self.step_output()]
                if unnamed:
                    self.outcome.violations.append(f"step {name}: the 2650 refusal does not name pipeline(s) "
                                                   f"{', '.join(unnamed)}")
        else:
            raise ValueError(f"unknown step kind {kind!r}")

    def final_run(self) -> None:
        """One clean run so that everything delivered is processed; a non-zero exit with a named error is a fate."""
        code = self.cli(self.run_args(), "final:run", accept=(0, 3))
        if code == 3:
            text = (self.folder / "cli.log").read_text(errors="replace").splitlines()
            named = [line for line in text[-40:] if "code" in line and ("fatal" in line or "degraded" in line)]
            self.outcome.named_error = named[-1] if named else "degraded (exit 3)"

    def run(self) -> Outcome:
        started = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "steps.txt").write_text(self.scenario.describe() + "\n")
        with open(self.folder / "harness.log", "a") as self.log:
            self.write_spec()
            try:
                for n, step in enumerate(self.scenario.steps, 1):
                    self.step(n, step)
                self.final_run()
            finally:
                for _, _, state_dir in self.pipelines.values():
                    if any(processes_of(state_dir).values()):
                        self.kill_everything(None, state_dir)
            (self.folder / "ledger.json").write_text(json.dumps(self.ledger.to_json()))
            self.outcome.violations += check(self.ledger, self.folder / "out" / "lake", self.folder / "out" / "dlq",
                                             [s for _, _, s in self.pipelines.values()], self.outcome.named_error)
        self.outcome.seconds = time.monotonic() - started
        return self.outcome


def run_scenario(scenario: Scenario, root: Path, rerun: str = "") -> Outcome:
    harness = Harness(scenario, root / f"seed-{scenario.seed}")
    harness.outcome.rerun = rerun
    return harness.run()
