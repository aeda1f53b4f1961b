"""The northbound: the REST API (`api`) and its Prometheus metrics (`metrics`).

`api.create_app(service, config)` builds the FastAPI app over a
`controller.service.ControllerService`; `api.serve(service, config)` runs it with
uvicorn in a thread. Nothing here plans or talks to switches: every request is
handed to the service.
"""
