"""Controller-mode requests a broker answers (controller.md §9, §5): GET_BROKER_EPOCH_CACHE (1007), and
NOTIFY_BROKER_ROLE_CHANGED (1008). A notice on the broker's own port may come from anyone, so it only makes the broker
ask its controller at once; notices the controller sends on the broker's connection to it are followed directly
(broker/replicas/controller_link.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.controller import EpochEntry, EpochEntryCache

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.replicas.roles import BrokerRoles
    from broker.store.commit_log import CommitLog


class ReplicasProcessor:
    """`roles` is None outside controller mode; its ``manager`` (the ReplicasManager) exists once the broker started."""

    def __init__(self, config: "BrokerConfig", commit_log: "CommitLog", roles: "BrokerRoles | None") -> None:
        self.config = config  # read per request: the broker id changes with the role
        self.commit_log = commit_log
        self.roles = roles

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.GET_BROKER_EPOCH_CACHE: self.get_broker_epoch_cache,
                RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.notify_broker_role_changed}

    def get_broker_epoch_cache(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand:
        roles = self.roles
        if roles is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "this broker is not in controller mode "
                                     "(enableControllerMode=false): it keeps no epochs")
        cfg = self.config
        max_offset = self.commit_log.max_offset
        entries = [EpochEntry(e, start, end) for e, start, end in roles.epoch_file.with_ends(max_offset)]
        body = EpochEntryCache(cfg.broker_cluster_name, cfg.broker_name, cfg.broker_id, entries, max_offset)
        return cmd.make_response(ResponseCode.SUCCESS, None, body=body.encode())

    def notify_broker_role_changed(self, channel: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        manager = self.roles.manager if self.roles is not None else None
        if manager is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "this broker is not in controller mode")
        manager.on_role_hint()  # anyone can reach this port: ask the controller instead of obeying the message
        return cmd.make_response(ResponseCode.SUCCESS, None)
