"""The protocol-neutral messaging core: typed requests in, one :class:`~broker.core.outcome.Outcome` out.

A remoting processor and the gRPC service each decode their wire format once into a typed request from this package,
the one authorizer decides on that same object (``request.needs()``), the core executes it, and the caller translates
the Outcome back into its own wire format. No remoting frame is built for a gRPC request, and no protobuf for a
remoting one. What the core has:

* send (single and batch, incl. transactional halves and their checks): send.py, send_batch.py, send_types.py,
  send_limits.py, with replication.py for the wait on slaves — remoting sends and gRPC SendMessage;
* pull and long polling: consume.py (PullRequest / Puller) on arrivals.py, the one new-message notification —
  remoting PULL_MESSAGE / LITE_PULL_MESSAGE;
* POP receive, ack, change-invisibility and forward-to-dead-letter: pop.py — gRPC's consumer RPCs;
* end-transaction: transaction.py — remoting END_TRANSACTION and gRPC EndTransaction;
* recall of a timed message: recall.py — remoting RECALL_MESSAGE and gRPC RecallMessage;
* offsets: offsets.py — a group's committed offsets (query, update, reset by time) and a queue's own (min, max,
  by store time, earliest store time) — remoting QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET,
  INVOKE_BROKER_TO_RESET_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME.

* send-back of a failed message and the dead-letter resend: send_back.py (with retries.py, the retry limit and
  dead-letter rule the send path shares), stored as a send is — remoting CONSUMER_SEND_MSG_BACK, RESEND_DLQ_MESSAGE and
  the web console;
* admin: admin/ — topics, subscription groups, statistics, connections, the broker's configuration and figures —
  remoting admin codes (broker/processors/admin.py) and the web console (broker/console/), which also resets offsets
  through offsets.py.

Floors: the core sits with the processors and services (it uses the store, the managers and the filters); it never
imports a protocol front end (broker/processors/*, broker/grpc/*) nor the Broker class."""
