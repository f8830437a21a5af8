"""The gRPC endpoint's client table forgets clients that went silent without ending their session."""

from __future__ import annotations

from broker.grpc.service import ClientTable
from protocol.grpc import definition_pb2 as pb


def test_silent_clients_are_forgotten_and_live_ones_kept():
    now = [0.0]
    table = ClientTable(forget_s=3600.0, clock=lambda: now[0])
    settings, last_seen = table.settings, table.last_seen  # the service and its consumer RPCs hold these dicts
    for i in range(1000):  # clients that crashed: no NotifyClientTermination
        table.settings[f"gone-{i}"] = pb.Settings()
        table.seen(f"gone-{i}")
    now[0] = 3000.0
    table.settings["live"] = pb.Settings()
    table.seen("live")
    now[0] = 3700.0
    for i in range(30):  # new clients arrive: a sweep forgets the ones silent for an hour
        table.seen(f"new-{i}")
    assert "gone-0" not in last_seen and "gone-999" not in settings
    assert "live" in settings and "live" in last_seen and len(last_seen) == 31
    assert table.settings is settings and table.last_seen is last_seen
    now[0] = 20_000.0
    for i in range(2000):  # the table stays bounded by the recent clients, however many came and went
        now[0] += 10.0
        table.seen(f"burst-{i}")
    assert len(last_seen) < 1100


def test_a_client_that_ends_its_session_is_dropped():
    table = ClientTable()
    table.settings["c"] = pb.Settings()
    table.seen("c")
    assert table.forget("c") is not None and "c" not in table.last_seen
    assert table.forget("c") is None
