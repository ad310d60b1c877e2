"""What a maintenance run leaves behind: its result (`results`), its folder of plan and results
under ``_maintenance/<job>/<run_id>/`` (`folder`), and the retention of those folders (`retention`)."""
