"""The maintenance jobs, one package each (`walk`, `expire`, `orphans`, `export`).

Each package holds a pure ``rules.py`` (what is live, what may go, what a plan holds: no I/O,
no Spark) beside ``job.py`` (the run function, split into phases) and the job's other modules.
The jobs run over the shared engine in `trinitylake.spark` (execution, session, output,
delete, runner); `trinitylake.jobs.registry` holds one record per job."""
