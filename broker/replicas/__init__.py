"""Controller mode, broker side (issue 28; controller.md §3-§10): the persistent broker id (identity.py), the
connections to the controllers (controller_link.py), registration, heartbeats, role sync and SyncStateSet proposals
(manager.py), and the role changes at run time (roles.py)."""
