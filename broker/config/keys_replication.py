"""Replication keys: the HA link (master/slave), the broker side of controller mode (issue 28, controller.md
§3-§10) and the controller hosted by the embedded name server (``broker.controller.config.ControllerConfig``
takes its fields from here and checks them)."""

from __future__ import annotations

import functools

from .entry import Port, Positive, Range, key

__all__ = ["KEYS"]

_k = functools.partial(key, concern="replication")
_IN_CONTROLLER_MODE = "enable_controller_mode"

KEYS = (
    # HA link
    _k("haListenPort", int, optional=True, check=Port(), doc="unset: listenPort + 1"),
    _k("haMasterAddress", str, optional=True,
       doc="a slave's fixed master HA address (else learnt from the name server)"),
    _k("slaveTimeout", int, optional=True, doc="SYNC_MASTER: ms to wait for a slave's ack; unset: syncFlushTimeout"),
    # issue 27, HA link: connections the HA port accepts at once (past it: closed at accept, before TLS or the
    # handshake); authentication follows aclEnable (a SLAVE signs with accessKey/secretKey), TLS tlsMode=enforcing
    _k("haMaxConnections", int, 32, Range(1, 65535, "expected 1..65535, got {}")),
    # issue 28, broker side of controller mode: the controller names this broker's id and role (no brokerId/
    # brokerRole needed) and changes the role at run time; the store keeps an epoch file; the master keeps a
    # SyncStateSet and the ack rules of allAckInSyncStateSet / inSyncReplicas / minInSyncReplicas. controllerAddr is
    # `host:port;host:port` (checked across keys); brokerElectionPriority: lower wins. The periods are checked only
    # in controller mode.
    _k("enableControllerMode", bool, False),
    _k("controllerAddr", str, ""),
    _k("brokerElectionPriority", int, 2**31 - 1),
    _k("controllerHeartBeatTimeoutMills", int, 10_000, Positive(), when=_IN_CONTROLLER_MODE),
    _k("syncBrokerMetadataPeriod", int, 5000, Positive(), when=_IN_CONTROLLER_MODE),
    _k("checkSyncStateSetPeriod", int, 5000, Positive(), when=_IN_CONTROLLER_MODE),
    _k("syncControllerMetadataPeriod", int, 10_000, Positive(), when=_IN_CONTROLLER_MODE),
    _k("brokerHeartbeatInterval", int, 1000, Positive(), when=_IN_CONTROLLER_MODE),
    _k("allAckInSyncStateSet", bool, False),
    _k("inSyncReplicas", int, 1, Positive(), when=_IN_CONTROLLER_MODE),
    _k("minInSyncReplicas", int, 1, Positive(), when=_IN_CONTROLLER_MODE),
    _k("haMaxTimeSlaveNotCatchup", int, 15_000, Positive(), when=_IN_CONTROLLER_MODE),
    _k("storePathEpochFile", str, optional=True, doc="unset: <storePathRootDir>/epochFileCheckpoint"),
    _k("storePathBrokerIdentity", str, optional=True, doc="unset: <storePathRootDir>/brokerIdentity"),
    _k("asyncLearner", bool, False, doc="never joins the SyncStateSet, never elected"),
    _k("readUnCommitted", bool, False,
       doc="consumers also see messages past confirmOffset (not yet on every set member)"),
    # issue 28, controller part: the embedded name server also hosts a controller (enableControllerInNamesrv), with
    # the controller's keys (checked by ControllerConfig when enableControllerInNamesrv=true; controller.md §12)
    _k("enableControllerInNamesrv", bool, False),
    _k("controllerType", str, "local"),
    _k("controllerStorePath", str, "", doc='"" -> ~/<controllerType>Controller'),
    _k("controllerEtcdEndpoints", str, ""),
    _k("scanNotActiveBrokerInterval", int, 5000),
    _k("scanInactiveMasterInterval", int, 5000),
    _k("electMasterMaxRetryCount", int, 3),
    _k("enableElectUncleanMaster", bool, False),
    _k("notifyBrokerRoleChanged", bool, True),
)
