"""The maintenance jobs, one package each (`walk`, `expire`, `orphans`, `export`).

Each package holds a pure ``rules.py`` (what is live, what may go, what a plan holds: no I/O,
no Spark) beside ``job.py`` (the run function, split into phases) and the job's other modules.
The jobs run over the shared engine in `trinitylake.spark` (execution, session, output,
delete) through the runner (`trinitylake.jobs.runner`: spark-submit, ``tlake <job>``);
`trinitylake.jobs.registry` holds one record per job, and `trinitylake.jobs.actions` (the
Python API: jobs and history as DataFrames) runs them from a user's Spark session. Nothing in `trinitylake.spark` imports a job."""
