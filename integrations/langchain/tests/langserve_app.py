"""A saved gate served with LangServe, as a user deploys it: ``python langserve_app.py
GATE_DIR PORT`` serves ``GateRunnable(load_gate(GATE_DIR))`` under ``/gate`` on
127.0.0.1:PORT, with ``GET /healthz`` for a test to wait on."""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI
from langserve import add_routes

from adaptive_gates import load_gate
from langchain_adaptive_gates import GateRunnable


def create_app(gate_dir: str) -> FastAPI:
    app = FastAPI()
    add_routes(app, GateRunnable(load_gate(gate_dir)), path="/gate")

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


if __name__ == "__main__":
    gate_dir, port = sys.argv[1], int(sys.argv[2])
    uvicorn.run(create_app(gate_dir), host="127.0.0.1", port=port, log_level="warning")
