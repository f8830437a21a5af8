"""One phase's measurement (PhaseResult) and how it is printed: the progress row, the table and the JSON record."""

from __future__ import annotations

TARGETS = {"pipelined": 40_000, "batch": 150_000, "pull": 200_000, "push": 100_000}
# pull-tag / pull-sql: target >= 50% of pull-all's delivery rate (checked in the note, not here)


class PhaseResult:
    def __init__(self, name: str, messages: int, seconds: float, note: str = "") -> None:
        self.name = name
        self.messages = messages
        self.seconds = seconds
        self.note = note
        self.client_cpu = 0.0  # CPU seconds the bench process used during the phase
        self.broker_cpu = 0.0  # CPU seconds the broker process used during the phase
        self.examined: int | None = None  # filtered pulls: queue entries the broker looked at

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {"phase": self.name, "messages": self.messages, "seconds": round(self.seconds, 3),
                "msgs_per_s": round(self.rate), "client_cpu_s": round(self.client_cpu, 2),
                "broker_cpu_s": round(self.broker_cpu, 2), "note": self.note,
                **({} if self.examined is None else {"examined": self.examined,
                                                    "examined_per_s": round(self.examined / self.seconds)})}


def row(r: PhaseResult) -> str:
    target = TARGETS.get(r.name)
    verdict = "" if target is None else ("ok" if r.rate >= target else f"below {target:,}")
    cpu = f"{r.client_cpu:7.2f} {r.broker_cpu:7.2f}"
    return f"{r.name:<10} {r.messages:>10,} {r.seconds:>8.2f} {r.rate:>12,.0f}  {verdict:<14} {cpu}  {r.note}"


def print_table(results: list[PhaseResult]) -> None:
    print(f"{'phase':<10} {'messages':>10} {'seconds':>8} {'msgs/s':>12}  {'target':<14} "
          f"{'cli-cpu':>7} {'brk-cpu':>7}  notes")
    for r in results:
        print(row(r))
