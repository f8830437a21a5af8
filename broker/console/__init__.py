"""The broker's built-in web console (dashboardPort): overview, topics, consumer groups, messages, dead letters."""
