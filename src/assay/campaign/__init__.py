"""Run many: plan the agents x tasks x levels x epochs matrix, schedule it, resume it."""
