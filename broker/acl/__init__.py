"""Plain ACL (RocketMQ 4.x ``plain_acl.yml``): accounts, per-request resources, the validator and its file watcher."""
