"""Scripted stakeholders: the world (people, calendar, inbox, pilot), topic routing, the
signed question ledger, and the Unix-socket server the sandbox's `bin/ask` talks to."""
