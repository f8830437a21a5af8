"""The protocol-neutral messaging core: typed requests in, one :class:`~broker.core.outcome.Outcome` out.

A remoting processor and the gRPC service each decode their wire format once into a typed request from this package
(send, pull, POP receive/ack/change-invisibility, end-transaction, offsets, admin), the one authorizer decides on that
same object, the core executes it, and the caller translates the Outcome back into its own wire format. No remoting
frame is built for a gRPC request, and no protobuf for a remoting one.

Floors: the core sits with the processors and services (it uses the store, the managers and the filters); it never
imports a protocol front end (broker/processors/*, broker/grpc/*) nor the Broker class."""
