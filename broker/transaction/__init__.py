"""Transactional messages: half/op records (half.py) and the decision and check-back service (service.py)."""
