"""The broker: store, managers, processors, remoting server(s) and background services.

Lifetimes are explicit: `start()` brings everything up in dependency order, `shutdown()` takes
it down in reverse (stop accepting, answer held pulls, persist state, close the store cleanly so
the next start does a normal recovery). Background loops are tracked tasks cancelled and awaited
on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from broker.acl.setup import build_acl
from broker.clients import ClientHousekeeping, notify_group_changed
from broker.config import ConfigError, BrokerConfig
from broker.connection_guard import ConnectionGuard, ConnectionLimits
from broker.core.admin import AdminService
from broker.core.arrivals import Arrivals
from broker.core.consume import GroupNames, Puller
from broker.core.offsets import OffsetService
from broker.core.pop import PopCore
from broker.core.recall import RecallService
from broker.core.send_back import SendBackService
from broker.descriptors import DescriptorBudget, soft_descriptor_limit
from broker.listeners import listen, listen_optional
from broker.managers.broker_name_file import write_broker_name
from broker.managers.consumer_filter import ConsumerFilterManager
from broker.managers.consumer_manager import ConsumerManager
from broker.managers.consumer_offset import ConsumerOffsetManager
from broker.managers.dlq_resends import DlqResendLog
from broker.managers.producer_manager import ProducerManager
from broker.managers.rebalance_lock import RebalanceLockManager
from broker.managers.subscription_group import SubscriptionGroupManager
from broker.managers.topic_config import TopicConfigManager
from broker.ha import HASlots, replication_info
from broker.master_services import MasterServices
from broker.metrics import BrokerMetrics, MetricsEndpoint, RateSampler
from broker.pop.service import PopService, RenewPolicy
from broker.processors import (
    AdminProcessor,
    ClientCallProcessor,
    ClientManageProcessor,
    ConsumerOffsetProcessor,
    LockProcessor,
    Processors,
    QueryProcessor,
    ReplicasProcessor,
    RetryProcessor,
    build_dispatch_table,
    build_run_table,
)
from broker.processors.pull import PullProcessor
from broker.processors.send import SendProcessor
from broker.processors.transaction import TransactionProcessor
from broker.preflight import (PortCheck, check_paths, check_ports, check_store_lock,
                              store_path_problem)
from broker.transaction.service import TransactionService, TransactionSettings
from broker.ha.master import HAMaster, admin_secret_lookup
from broker.ha.slave import HASlave
from broker.ha.metadata_sync import MetadataSync
from broker.namesrv.outbound import OutboundConnection
from broker.remoting_server import RemotingServer
from broker.tls import TlsSettings, outbound_context, outbound_tls_enabled
from broker.schedule.service import ScheduleMessageService
from broker.timer.service import TimerMessageService
from broker.store.message_store import MessageStore
from broker.view import BrokerView
from protocol.ids import pack_host

log = logging.getLogger(__name__)

DEFAULT_DASHBOARD_PORT = 8082
DEFAULT_GRPC_PORT = 8081



def _descriptor_budget(config: BrokerConfig) -> DescriptorBudget:
    """The process's descriptor reserve; one that leaves no room under the open-file limit stops start-up."""
    budget = DescriptorBudget(config.file_descriptor_reserve)
    limit = soft_descriptor_limit()
    if limit is not None and config.file_descriptor_reserve > 0:
        budget.refresh()
        if budget.open_count + config.file_descriptor_reserve >= limit:
            raise ConfigError(f"{config.file_descriptor_reserve} descriptors kept free leave no room under the "
                              f"open-file limit {limit} ({budget.open_count} open at start): raise `ulimit -n` or "
                              f"lower fileDescriptorReserve", "fileDescriptorReserve")
    return budget


class Broker:
    """One broker process worth of state and services."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store_host: bytes = pack_host(config.broker_ip1 or "127.0.0.1", config.listen_port)
        store_config = config.to_store_config()
        # Metrics observe sends (the remoting servers), pulls (the pull processor) and flushes (the store) through
        # observers those owners call: per request, never per message.
        self.metrics = BrokerMetrics(bool(config.metrics_port), config.slow_flush_warn_millis)
        config_dir = config.config_dir
        self.ha = HASlots()  # the HA listener / client (set by _build_replication; controller mode swaps them)
        self.consumer_offset_manager = ConsumerOffsetManager(config_dir)
        self.store = MessageStore(store_config, flush_observer=self.metrics.observe_flush,
                                  consumer_offsets=self.consumer_offset_manager.offsets_by_topic)
        # New topics and connections are refused before the store runs out of descriptors (fileDescriptorReserve).
        self.descriptors = _descriptor_budget(config)
        self.topic_config_manager = TopicConfigManager(config, config_dir, descriptors=self.descriptors)
        self.subscription_group_manager = SubscriptionGroupManager(config_dir, config.auto_create_subscription_group)
        self.consumer_manager = ConsumerManager(on_group_changed=self.notify_consumer_ids_changed)
        self.producer_manager = ProducerManager()
        self.clients = ClientHousekeeping(self.consumer_manager, self.producer_manager,
                                          config.channel_expired_timeout)
        self.consumer_filter_manager = ConsumerFilterManager(config_dir)
        self.dlq_resends = DlqResendLog(config_dir)  # the audit of dead-letter resends (console, mqadmin)
        self.rebalance_lock_manager = RebalanceLockManager(config.rebalance_lock_max_live_time)
        self.schedule_service = ScheduleMessageService(self.store, config_dir, config.delay_levels_ms())
        self.timer_service = TimerMessageService(self.store, config_dir)
        self.transaction_service = TransactionService(
            self.store, self.consumer_offset_manager,
            TransactionSettings(config.transaction_time_out, config.transaction_check_interval,
                                config.transaction_check_max, float(config.file_reserved_time)),
            store_host=self.store_host, broker_name=config.broker_name,
            producer_channel=self.producer_manager.find_channel,
            store_message=lambda message: self.send_service.store_written(message))
        # The one notification of new messages (fed by the store per put): held pulls and POP receives wait on it.
        self.arrivals = Arrivals()
        group_names = GroupNames()
        self.puller = Puller(config, self.store, self.topic_config_manager, self.subscription_group_manager,
                             self.consumer_manager, self.consumer_offset_manager, self.consumer_filter_manager,
                             self.arrivals, group_names)
        # POP consumption (5.x SDKs over gRPC): one store, groups and offsets shared with remoting consumers.
        self.pop_service = PopService(self.store, self.topic_config_manager, self.subscription_group_manager,
                                      self.consumer_offset_manager, config_dir, config.broker_name, self.arrivals,
                                      store_message=lambda message: self.send_service.store_written(message),
                                      renew=RenewPolicy(config.default_invisible_time_mills,
                                                        config.renew_ahead_time_millis, config.renew_max_time_millis))
        # delayed delivery, the timer, transaction checks and POP: run by a master only (started and stopped here, or
        # by the controller-mode role changes)
        self.master_services = MasterServices(self.store, self.topic_config_manager, self.schedule_service,
                                              self.timer_service, self.transaction_service, self.pop_service)
        self.pop_core = PopCore(self.pop_service, self.topic_config_manager, self.subscription_group_manager, config,
                                group_names)
        # The messaging core's offsets: committed (query, update, reset by time) and a queue's own (min, max, by time).
        self.offset_service = OffsetService(self.store, self.topic_config_manager, self.subscription_group_manager,
                                            self.consumer_offset_manager, group_names)
        # The messaging core's send and end-transaction (broker/core): every protocol's sends and decisions.
        self.send_service, self.end_transaction_service = self._build_core()
        self.recall_service = RecallService(config, self.topic_config_manager, self.store, self.timer_service)
        # One set of connection limits for every port of this process (broker, VIP, embedded name server).
        self.connection_guard = ConnectionGuard(ConnectionLimits.from_config(config), self.descriptors)
        # Plain ACL (aclEnable): the accounts file is read here so that a bad one stops start-up (ConfigError).
        # One Authorizer decides for every protocol (remoting guard, gRPC, web console); None when ACL is off.
        self.acl_validator, self.acl_watcher, request_guard = build_acl(
            config, (self.store, self.consumer_offset_manager, self.consumer_manager))
        self.authorizer = self.acl_validator.authorizer if self.acl_validator is not None else None
        # One TLS mode and context for every port too; a missing or bad cert file raises ConfigError here.
        self.tls = TlsSettings.from_config(config)
        self.ssl_context = self.tls.server_context()
        tls_args = {"tls": self.tls, "ssl_context": self.ssl_context}
        self._build_replication(config)
        self.boot_timestamp_ms = int(time.time() * 1000)
        self.rates = RateSampler(self.store, self.consumer_offset_manager)
        # What the console, the metrics endpoint and admin answers read: the state, never the Broker.
        self.view = BrokerView(
            config, self.store, self.topic_config_manager, self.subscription_group_manager,
            self.consumer_offset_manager, self.consumer_manager, self.producer_manager, self.transaction_service,
            rates=self.rates, connections=lambda: sum(len(server.channels) for server in self.servers),
            held_pulls=lambda: self.processors.pull.hold_service.held_count,
            replication=lambda: replication_info(config, self.ha_master, self.ha_slave,
                                                 lambda: self.store.commit_log.max_offset),
            boot_timestamp_ms=self.boot_timestamp_ms)
        # The core's admin requests (broker/core/admin): mqadmin's over remoting and the web console's actions.
        self.send_back_service = SendBackService(config, self.store, self.topic_config_manager,
                                                 self.subscription_group_manager, self.send_service, self.dlq_resends)
        self.admin_service = AdminService(
            config, self.store, self.topic_config_manager, self.subscription_group_manager, self.consumer_manager,
            self.consumer_offset_manager, self.view, self.producer_manager, self.send_back_service)
        self.processors = self._build_processors(config)
        self.dispatch_table = build_dispatch_table(self.processors)
        self.run_table = build_run_table(self.processors)
        observers = self.metrics.request_observers()
        self.server = RemotingServer(self.dispatch_table, config.listen_host, config.listen_port,
                                     max_frame_size=config.frame_max_length, name="broker",
                                     guard=self.connection_guard, request_guard=request_guard,
                                     run_handlers=self.run_table, observers=observers, **tls_args)
        # "VIP"/fast channel: Java clients <= 4.4.0 send to listenPort - 2 by default. Same handlers.
        self.vip_server: RemotingServer | None = None
        if config.enable_vip_channel and config.listen_port > 2:
            self.vip_server = RemotingServer(self.dispatch_table, config.listen_host, config.listen_port - 2,
                                             max_frame_size=config.frame_max_length, name="broker-vip",
                                             guard=self.connection_guard, request_guard=request_guard,
                                             run_handlers=self.run_table, observers=observers, **tls_args)
        self.metrics_endpoint = MetricsEndpoint(self.view, self.metrics, config.metrics_host, config.metrics_port)
        self.namesrv = None
        self.registrar = None
        self.console: Any = None  # broker/console ConsoleServer once started
        self.grpc: Any = None  # broker/grpc GrpcEndpoint once started
        self._tasks: list[asyncio.Task] = []
        self._started = False
        self._stopped = False

    def _build_core(self) -> tuple[Any, Any]:
        """The core's send service (the narrow things it uses) and end-transaction service."""
        from broker.core.replication import ReplicationWaiter
        from broker.core.send import SendService
        from broker.core.transaction import EndTransactionService

        store, ha = self.store, self.ha
        replication = ReplicationWaiter(self.config, lambda: ha.master,
                                        lambda: store.commit_log_max_offset, lambda: store.config.replica)
        send = SendService(self.config, store, self.topic_config_manager, self.subscription_group_manager,
                           sync_flush=bool(store.config.sync_flush), replication=replication,
                           remember_half=self.transaction_service.remember_half,
                           delay_max_level=lambda: self.schedule_service.max_level,
                           observer=self.metrics.observe_core_send)
        return send, EndTransactionService(self.config, self.transaction_service)

    def _build_replication(self, config: BrokerConfig) -> None:
        """A master streams its log to slaves on haListenPort; a slave pulls its master's. Under aclEnable both
        sides authenticate with an admin account (the slave's accessKey/secretKey); under tlsMode=enforcing the
        link is TLS (the slave: tlsEnable)."""
        credentials = (config.access_key, config.secret_key) if config.acl_enable and config.access_key else None
        outbound_ssl = outbound_context(config) if outbound_tls_enabled(config) else None
        admin_secret = admin_secret_lookup(self.acl_validator) if self.acl_validator is not None else None
        ha_ssl = self.ssl_context if self.tls.mode == "enforcing" else None
        self.ha_master = HAMaster(
            self.store.commit_log, config.listen_host, config.ha_port, max_connections=config.ha_max_connections,
            admin_secret=admin_secret, ssl_context=ha_ssl) if config.is_master else None
        # issue 28, controller mode: starts as a fenced SLAVE; its HA objects are replicas/roles.py's
        self.ha_slave = None if config.is_master or config.enable_controller_mode else HASlave(
            self.store, config.ha_master_address, credentials=credentials, ssl_context=outbound_ssl)
        self.metadata_sync = None if config.is_master else MetadataSync(
            topics=self.topic_config_manager, groups=self.subscription_group_manager,
            offsets=self.consumer_offset_manager,
            delay_offset_path=os.path.join(config.config_dir, "delayOffset.json"), own_addr=config.broker_addr,
            connect=lambda addr: OutboundConnection(addr, max_frame_size=config.frame_max_length,
                                                    ssl_context=outbound_ssl),
            credentials=(config.access_key, config.secret_key) if config.access_key else None)
        self.roles = None
        self.replicas = None
        if config.enable_controller_mode:
            from broker.replicas.roles import BrokerRoles, RoleParts

            self.roles = BrokerRoles(RoleParts(
                config, self.store, self.consumer_offset_manager, self.topic_config_manager, self.metadata_sync,
                self.ha, self.master_services, refresh_role=self.send_service.refresh_role, wake=self.arrivals.notify,
                registrar=lambda: self.registrar, spawn=self._spawn, admin_secret=admin_secret,
                ha_ssl_context=ha_ssl))

    def _build_processors(self, config: BrokerConfig) -> Processors:
        """Each processor with the parts it uses."""
        store, topics, groups = self.store, self.topic_config_manager, self.subscription_group_manager
        consumers = self.consumer_manager
        return Processors(
            send=SendProcessor(self.send_service, self.recall_service),
            pull=PullProcessor(self.puller, self.arrivals, observer=self.metrics.observe_pull),
            transaction=TransactionProcessor(self.end_transaction_service, self.transaction_service,
                                             config.broker_name),
            client_manage=ClientManageProcessor(config, topics, groups, consumers, self.producer_manager,
                                                self.consumer_filter_manager),
            consumer_offset=ConsumerOffsetProcessor(self.offset_service, consumers, config.broker_name),
            query=QueryProcessor(self.offset_service, store),
            retry=RetryProcessor(self.send_back_service, self.schedule_service),
            lock=LockProcessor(self.rebalance_lock_manager),
            admin=AdminProcessor(self.admin_service),
            client_call=ClientCallProcessor(consumers, store, config.broker_name),
            replicas=ReplicasProcessor(config, store.commit_log, self.roles),
        )

    # ---- properties -----------------------------------------------------------------------------
    @property
    def ha_master(self) -> Any:
        """The HA listener of a master (None otherwise); controller mode swaps it (``self.ha``)."""
        return self.ha.master

    @ha_master.setter
    def ha_master(self, master: Any) -> None:
        self.ha.master = master

    @property
    def ha_slave(self) -> Any:
        """The HA client of a slave (None otherwise); controller mode swaps it (``self.ha``)."""
        return self.ha.slave

    @ha_slave.setter
    def ha_slave(self, slave: Any) -> None:
        self.ha.slave = slave

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def namesrv_port(self) -> int | None:
        return self.namesrv.port if self.namesrv is not None else None

    @property
    def servers(self) -> list[RemotingServer]:
        """The remoting servers answering clients (main port, and the VIP port when open)."""
        return [self.server] if self.vip_server is None else [self.server, self.vip_server]

    def listening(self) -> str:
        """The real bind address of every listener, for the boot line:
        ``broker 0.0.0.0:10911 (tls permissive), vip 0.0.0.0:10909, ha 0.0.0.0:10912, namesrv 0.0.0.0:9876,
        metrics 127.0.0.1:9100``."""
        parts = [f"broker {self.server.describe()}"]
        if self.vip_server is not None:
            parts.append(f"vip {self.vip_server.describe()}")
        if self.ha_master is not None and self.ha_master.port:
            parts.append(f"ha {self.ha_master.describe()}")
        if self.namesrv is not None and self.namesrv.server is not None:
            parts.append(f"namesrv {self.namesrv.server.describe()}")
        if self.metrics_endpoint.bind_addr:
            parts.append(f"metrics {self.metrics_endpoint.bind_addr}")
        if self.console is not None and self.console.bind_addr:
            parts.append(f"console http://{self.console.bind_addr}/")
        if self.grpc is not None and self.grpc.bind_addr:
            parts.append(f"grpc {self.grpc.bind_addr}")
        return ", ".join(parts)

    # ---- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        self._preflight()  # paths, store lock, ports: a start that fails here has written nothing
        try:
            self.store.lock()  # before reading or writing anything under the store directory
            os.makedirs(cfg.config_dir, exist_ok=True)
        except OSError as exc:
            raise ConfigError(store_path_problem(cfg.store_path_root_dir, exc), "storePathRootDir") from None
        self.topic_config_manager.load()
        self.subscription_group_manager.load()
        self.consumer_offset_manager.load()
        self.consumer_filter_manager.load()
        self.consumer_filter_manager.clean_expired()
        self.store.load()
        self._recover_topics_from_store()
        # held pulls and POP receives; the timer/schedule services and HA keep their own listeners: each wakes one
        # background loop on its own topic (or every append), not requests held for clients
        self.store.add_arrival_listener(self.arrivals.notify)
        if self.metrics.enabled:
            self.store.add_arrival_listener(self.metrics.on_arrival)
        await self.store.start()
        self._started = True
        self.transaction_service.load()  # decisions, also on a slave (it may become the master's copy)
        if cfg.is_master:
            await self.master_services.start()

        from broker.namesrv.registrar import BrokerRegistrar

        local_routes = None
        if cfg.enable_embedded_namesrv:
            from broker.namesrv.__main__ import NameServer

            controller_config = None
            if cfg.enable_controller_in_namesrv:  # issue 28: a controller on the name server's port
                from broker.controller.config import ControllerConfig

                controller_config = ControllerConfig.from_object(cfg)
            self.namesrv = NameServer(cfg.listen_host, cfg.namesrv_listen_port, cfg.frame_max_length,
                                      guard=self.connection_guard, acl_validator=self.acl_validator,
                                      tls=self.tls, ssl_context=self.ssl_context,
                                      controller_config=controller_config, advertise_host=cfg.broker_ip1)
            await listen("namesrvListenPort", cfg.listen_host, cfg.namesrv_listen_port, self.namesrv.start)
            local_routes = self.namesrv.route_info
        await listen("listenPort", cfg.listen_host, cfg.listen_port, self.server.start)
        await self._start_vip_server()
        if self.ha_master is not None:
            await self._start_ha_master()
        # A slave learns its master's addresses from each registration answer.
        master_listener = self.roles.learn_master if self.roles is not None else \
            self._learn_master if self.ha_slave is not None else None
        self.registrar = BrokerRegistrar(cfg, self.topic_config_manager, local_route_info=local_routes,
                                         master_listener=master_listener)
        if self.roles is not None:  # controller mode: fenced (no routes, no writes) until the controller decides
            await self._start_controller_mode()
        elif self.ha_slave is not None:
            self.ha_slave.start()
            self.metadata_sync.start()
        if self.roles is None:
            await self.registrar.start()
        if self.acl_watcher is not None:
            self.acl_watcher.start()
        self._spawn(self.clients.run(), "client-housekeeping")
        self._spawn(self._persist_offsets_periodically(), "offset-persistence")
        self.rates.start()
        await listen("metricsPort", cfg.metrics_host, cfg.metrics_port, self.metrics_endpoint.start)
        await self._start_console()
        await self._start_grpc()
        # Last: a start that fails above (store locked by another broker, a port taken) leaves the store unmarked.
        write_broker_name(cfg.config_dir, cfg.broker_cluster_name, cfg.broker_name)

    def _preflight(self) -> None:
        """Everything checkable before the store is touched (issue 31): ConfigError / StoreLockedError, one line."""
        cfg = self.config
        paths = [("storePathRootDir", cfg.store_path_root_dir), ("storePathCommitLog", cfg.commit_log_dir)]
        if cfg.enable_controller_mode:
            paths.append(("storePathEpochFile", os.path.dirname(os.path.abspath(cfg.epoch_file_path))))
        check_paths(paths, cfg.store_path_root_dir)
        check_store_lock(cfg.store_path_root_dir)
        ports = []
        if cfg.enable_embedded_namesrv:
            ports.append(PortCheck("namesrvListenPort", cfg.listen_host, cfg.namesrv_listen_port))
        ports.append(PortCheck("listenPort", cfg.listen_host, cfg.listen_port))
        if self.ha_master is not None and (cfg.ha_listen_port is not None or cfg.broker_role == "SYNC_MASTER"):
            ports.append(PortCheck("haListenPort", cfg.listen_host, cfg.ha_port))
        if cfg.metrics_port:
            ports.append(PortCheck("metricsPort", cfg.metrics_host, cfg.metrics_port))
        if cfg.dashboard_port:  # unset (default 8082) is best effort, 0 is off
            ports.append(PortCheck("dashboardPort", cfg.dashboard_host, cfg.dashboard_port))
        if cfg.enable_grpc_proxy and cfg.grpc_server_port:  # the same
            ports.append(PortCheck("grpcServerPort", cfg.listen_host, cfg.grpc_server_port))
        check_ports(ports)

    async def _start_controller_mode(self) -> None:
        """Issue 28: load the epoch file, then register with the controller in the background."""
        from broker.replicas.manager import ReplicasManager
        from broker.store.epoch_file import EpochFileError

        try:
            self.roles.load()
        except (EpochFileError, OSError) as exc:
            raise ConfigError(f"the epoch file cannot be read: {exc}", "storePathEpochFile") from None
        self.replicas = ReplicasManager(self.config, self.roles, self.roles.offsets,
                                        ssl_context=outbound_context(self.config)
                                        if outbound_tls_enabled(self.config) else None)
        self.roles.attach(self.replicas)
        self.replicas.start()

    def _learn_master(self, ha_addr: str | None, master_addr: str | None) -> None:
        """A slave's registration answer names its master: replicate from it and copy its metadata."""
        self.ha_slave.learn_master(ha_addr)
        self.metadata_sync.learn_master(master_addr)

    def _recover_topics_from_store(self) -> None:
        """Topics auto-created just before a crash may have queues on disk but no entry in topics.json
        (it is written shortly after the change); without one their acknowledged messages would be unreachable."""
        for topic, queue_ids in self.store.topics_and_queues().items():
            if topic in self.topic_config_manager.topics or not queue_ids:
                continue
            queue_nums = max(max(queue_ids) + 1, 1)
            if self.topic_config_manager.create_topic_if_absent(topic, queue_nums) is not None:
                log.warning("recovered topic %s (%d queues) from the store: it was missing from topics.json", topic, queue_nums)

    async def _start_ha_master(self) -> None:
        """The HA listener. Without an explicit haListenPort an ASYNC_MASTER only warns when listenPort + 1 is
        taken (it works alone, slaves just cannot attach); a SYNC_MASTER or an explicit port must have it."""
        cfg = self.config
        try:
            await self.ha_master.start()
        except OSError as exc:
            if cfg.ha_listen_port is not None or cfg.broker_role == "SYNC_MASTER":
                raise ConfigError(f"cannot listen on {cfg.listen_host}:{cfg.ha_port} for slaves: "
                                  f"{exc.strerror or exc}", "haListenPort") from None
            log.warning("HA port %d unavailable (%s); slaves cannot replicate from this master (set haListenPort)",
                        cfg.ha_port, exc.strerror or exc)
            self.ha_master = None
            return
        self.store.add_arrival_listener(self.ha_master.on_append)

    async def _start_vip_server(self) -> None:
        """Best effort: a busy listenPort - 2 only costs old clients their fast channel."""
        if self.vip_server is None:
            return
        try:
            await self.vip_server.start()
        except OSError as exc:
            log.warning("VIP channel port %d unavailable (%s); old clients with vipChannelEnabled=true "
                        "will fail to send", self.vip_server.port, exc.strerror or exc)
            self.vip_server = None

    async def _start_console(self) -> None:
        """The web console on dashboardPort (aiohttp is imported only when it runs)."""
        cfg = self.config
        port = DEFAULT_DASHBOARD_PORT if cfg.dashboard_port is None else cfg.dashboard_port
        if port == 0:
            return
        from broker.console.build import build_console
        from broker.console.replication import ClassicParts, ControllerParts

        if self.replicas is not None:  # issue 28: the group as the controller sees it, and this replica's own log
            parts: Any = ControllerParts(self.replicas.group_state, self.replicas.local_state, self.roles.local_state)
        else:
            parts = ClassicParts(lambda: cfg.broker_role, self.ha_master, self.ha_slave,
                                 lambda: self.store.commit_log.max_offset)
        console = build_console(cfg, port, self.view, self.admin_service, self.offset_service, self.consumer_manager,
                                self.dlq_resends, self.authorizer,
                                self.namesrv.route_info if self.namesrv is not None else None, parts)
        if await listen_optional("dashboardPort", cfg.dashboard_port, console, "web console"):
            self.console = console

    async def _start_grpc(self) -> None:
        """The gRPC endpoint of RocketMQ 5.x SDKs (enableGrpcProxy, grpcServerPort; grpcio is imported only when it
        runs)."""
        cfg = self.config
        port = DEFAULT_GRPC_PORT if cfg.grpc_server_port is None else cfg.grpc_server_port
        if not cfg.enable_grpc_proxy or port == 0:
            return
        from broker.grpc.parts import GrpcParts
        from broker.grpc.server import GrpcEndpoint

        parts = GrpcParts(cfg, self.send_service, self.end_transaction_service, self.pop_core, self.pop_service,
                          self.topic_config_manager, self.recall_service, self.transaction_service,
                          self.authorizer, self.tls)
        endpoint = GrpcEndpoint(parts, cfg.listen_host, port)
        if await listen_optional("grpcServerPort", cfg.grpc_server_port, endpoint, "gRPC endpoint"):
            self.grpc = endpoint

    def _spawn(self, coro, name: str) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro, name=name))

    async def shutdown(self) -> None:
        """Graceful stop; safe to call twice or after a failed start."""
        if self._stopped:
            return
        self._stopped = True
        for server in self.servers:
            await server.stop_accepting()
        try:
            await self.rates.stop()
            await self.metrics_endpoint.stop()
        except Exception:
            log.exception("stopping the metrics endpoint failed")
        endpoint, self.grpc = self.grpc, None
        if endpoint is not None:
            try:
                await endpoint.stop()
            except Exception:
                log.exception("stopping the gRPC endpoint failed")
        console, self.console = self.console, None
        if console is not None:
            try:
                await console.stop()
            except Exception:
                log.exception("stopping the web console failed")
        try:
            self.processors.pull.release_all()  # SQL pulls waiting their turn, then every held pull and receive
        except Exception:
            log.exception("releasing held pulls failed")
        if self.acl_watcher is not None:
            await self.acl_watcher.stop()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.master_services.shutdown()
        if self.replicas is not None:
            await self.replicas.stop()
        if self.roles is not None:
            await self.roles.stop()
            await self.metadata_sync.stop()
        if self.ha_master is not None:
            await self.ha_master.stop()
        if self.ha_slave is not None:
            await self.ha_slave.stop()
            await self.metadata_sync.stop()
        if self.registrar is not None:
            try:
                await asyncio.wait_for(self.registrar.close(), 3.0)
            except (asyncio.TimeoutError, Exception):
                log.warning("name server unregistration did not finish")
        await asyncio.sleep(0)  # let queued responses (released pulls) reach the transports
        for server in self.servers:
            await server.close()
        if self.namesrv is not None:
            await self.namesrv.close()
        if not self.store.locked:
            return  # never owned the store directory: touch nothing in it
        self._persist_all()
        if self._started:
            await self.store.shutdown()
        self.store.unlock()

    def _persist_all(self) -> None:
        for manager in (self.consumer_offset_manager, self.topic_config_manager, self.subscription_group_manager,
                        self.consumer_filter_manager, self.dlq_resends):
            try:
                manager.persist()
            except Exception:
                log.exception("persisting %s failed", getattr(manager, "path", manager))

    # ---- services -------------------------------------------------------------------------------
    def notify_consumer_ids_changed(self, group: str, channels: list[Any]) -> None:
        """The ConsumerManager's callback: NOTIFY_CONSUMER_IDS_CHANGED to the group's channels (broker/clients.py)."""
        notify_group_changed(self.consumer_manager, group, channels)

    async def _persist_offsets_periodically(self) -> None:
        interval = self.config.flush_consumer_offset_interval / 1000.0
        manager = self.consumer_offset_manager
        while True:
            await asyncio.sleep(interval)
            try:
                if manager.dirty:
                    await manager.persist_async()
            except Exception:
                log.exception("persisting consumer offsets failed")

