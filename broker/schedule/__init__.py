"""Delayed delivery: SCHEDULE_TOPIC_XXXX transformation and the schedule service."""
