"""Hostile peers: scripts run as another local user (setpriv) or as a misbehaving agent."""
