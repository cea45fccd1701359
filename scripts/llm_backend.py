"""Serve one GGUF model with llama.cpp (xllamacpp) as an OpenAI-compatible server on loopback.

Usage: llm_backend.py PORT GGUF ALIAS [CHAT_TEMPLATE]
Runs until SIGTERM or SIGINT. One CPU thread per server, so three fit on two cores.
With MOM_LLM_PROMPT_CACHE=off the server keeps no prompt between requests, so every request
pays its own prompt processing (evaluations: the order in which targets ask does not favour
any of them).
"""
import os
import signal
import sys
import threading

import xllamacpp


def main() -> None:
    port, gguf, alias = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    template = sys.argv[4] if len(sys.argv) > 4 else ""
    params = xllamacpp.CommonParams()
    params.model.path = gguf
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = 8192
    params.n_parallel = 2
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.model_alias = {alias}
    params.ui = False
    params.endpoint_metrics = True
    if os.environ.get("MOM_LLM_PROMPT_CACHE") == "off":
        params.cache_prompt = False
        params.cache_ram_mib = 0
    if template:
        # A base model without its own chat template: use llama.cpp's built-in one by name.
        params.use_jinja = False
        params.chat_template = template
    server = xllamacpp.Server(params)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"llm backend {alias} on 127.0.0.1:{port}", flush=True)
    stop.wait()
    del server


if __name__ == "__main__":
    main()
