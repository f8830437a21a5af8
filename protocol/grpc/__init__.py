"""RocketMQ 5.x's gRPC protocol (package apache.rocketmq.v2): our .proto definitions and the modules protoc
generated from them (the command is in definition.proto). Needs protobuf (a dependency of the package)."""
