"""Reports: the leaderboard and breakdowns, as tables, JSON, CSV and HTML."""
