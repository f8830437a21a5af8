"""The gRPC endpoint RocketMQ 5.x SDKs use (apache.rocketmq.v2.MessagingService), served by the broker itself."""
