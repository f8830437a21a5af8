"""POP consumption (the model behind RocketMQ 5.x SDKs' ReceiveMessage / AckMessage / ChangeInvisibleDuration):
the broker hands messages out to a group, hides each one for an invisible duration, forgets it once acked and hands
it out again (delivery attempt + 1) when the time lapses first."""
