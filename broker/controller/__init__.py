"""The controller of controller mode (automatic master failover, controller.md): per-group replica state, broker
ids, heartbeats, elections. Runs alone (``mqcontroller``) or inside a name server (``enableControllerInNamesrv``).

Floors: state, election, logic and liveness are sans-I/O; backend/etcd_backend store the state; service answers
requests and runs the scans; build makes one from its configuration; __main__ is the process.
"""
