"""5.x timed messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): delivered at their own time, not at a
classic delay level."""
