"""The pipeline's stages: the group-commit writer the webhooks record through and the deliveries
it hands on, the intake, the dispatcher with its lanes and turns, the sender with its rate limits,
the ack pacer, the backlog's bounds, the lease and the purge; ``_wiring`` starts them together
(``pipeline_ctx``).

Nothing is imported here: the modules are imported by name, so that ``_keys`` and the HTTP
surfaces can reach one stage without starting an import of the whole pipeline.
"""
