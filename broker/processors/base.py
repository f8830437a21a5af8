"""What request processors share: the group-name checks (with a memo of names that passed). Every processor is
constructed with the narrow parts it uses, never the Broker."""

from __future__ import annotations

from broker.managers.derived_names import CONSUMER_GROUP_MAX_LENGTH, consumer_group_problem
from broker.managers.topic_config import validate_group

_VALID_GROUPS_LIMIT = 100_000


class GroupChecks:
    """Group-name checks with a memo, so a name seen before costs a set hit on the hot path."""

    def __init__(self) -> None:
        self._valid_groups: set[str] = set()  # names that passed validate_group

    def group_problem(self, group: str | None) -> str | None:
        """None when `group` is a legal group name (remembered), else the reason for the error remark."""
        if group in self._valid_groups:
            return None
        problem = validate_group(group)
        if problem is None:
            if len(self._valid_groups) >= _VALID_GROUPS_LIMIT:
                self._valid_groups.clear()
            self._valid_groups.add(group)
        return problem

    def consumer_group_problem(self, group: str | None) -> str | None:
        """group_problem, and the group's derived topics (%RETRY%, %DLQ%) must be legal names: checked where a consumer
        group is first used, so a group they do not fit is refused at once rather than failing later unheard."""
        if group is not None and group in self._valid_groups and len(group) <= CONSUMER_GROUP_MAX_LENGTH:
            return None
        problem = self.group_problem(group)
        return problem if problem is not None else consumer_group_problem(group)
