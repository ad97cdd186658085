"""MLflow, as a mirror of the stages for people: never an input of a stage.

`runs` opens one run per stage (tags, params, curves), `artifacts` logs what a stage made into
its run (models, audits, Data Docs, records), `links` builds links into the UI by run id, and
`server` adds the project's routes to MLflow's server (`make mlflow-ui`).
"""
